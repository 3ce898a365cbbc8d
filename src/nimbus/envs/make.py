"""Build one contract-checked, seeded gymnasium env.

The wrapper stack is ``_SeedOnFirstReset(user wrappers(TimeLimit(ContractChecked(raw env))))``: the contract is
checked on exactly what the env returns (so an old-API env is caught before the time limit tries to
unpack its 4-tuple), the time limit of the env's spec still applies, and the first ``reset()``
without an explicit seed uses `make_env`'s seed. gymnasium's own OrderEnforcing and
PassiveEnvChecker wrappers are dropped: `ContractChecked` raises where they would only warn. A user's
env arrives through ``imports`` or a ``module:EnvId`` id, and ``wrappers`` (``env.wrappers``) go on
top of the time limit (envs/custom.py); the outermost observation space must be a Box.

Example::

    env = make_env(env_id="CartPole-v1", seed=7, actor_rank=2)
    obs, info = env.reset()            # seeded with 7
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.error import DependencyNotInstalled
from gymnasium.wrappers import TimeLimit

from nimbus.envs.checks import ContractChecked, refused_kwargs, unknown_kwarg
from nimbus.envs.custom import apply_wrappers, check_observation_space, import_modules, registered_id
from nimbus.envs.registry import list_envs, required_extra
from nimbus.errors import ConfigError

logger = logging.getLogger(__name__)
# what an env's constructor raises when it judges an argument's value (gymnasium's envs assert; others raise
# ValueError, or KeyError for a name not in a table). Not OSError, TimeoutError or an injected fault: those are a
# platform's failures, which the runtime retries (runtime/faults.py)
REFUSALS = (AssertionError, ValueError, LookupError)


def make_env(*, env_id: str, seed: int, kwargs: dict[str, Any] | None = None, actor_rank: int = 0,
             imports: Sequence[str] = (), wrappers: Sequence[str] = ()) -> gym.Env:
    """A gymnasium env for `env_id`, contract-checked, seeded with `seed` on its first reset.

    ``imports`` are imported first (they register the user's ids); ``wrappers`` go on top of the time limit.
    Raises ConfigError for an unknown id (listing close matches), a missing pip extra (naming it), an
    ``env.kwargs`` key the env does not take (naming it), ``env.kwargs`` whose values the env's constructor
    refuses (naming them and its error), or an observation space that is not a Box (naming the wrapper that
    fixes it).
    """
    import_modules(modules=imports, key="env.imports")
    _check_known(env_id=registered_id(env_id=env_id))
    try:
        made = gym.make(env_id, disable_env_checker=True, **(kwargs or {}))
    except (DependencyNotInstalled, ImportError) as err:
        raise _missing_dependency(env_id=env_id, err=err) from err
    except TypeError as err:   # an env.kwargs key the constructor does not take: exit 2 naming it
        raise unknown_kwarg(error=err, kwargs=kwargs or {}, env_id=env_id) or err from None
    except REFUSALS as err:   # a value of env.kwargs the env refuses: exit 2 naming them (without any: its own bug)
        if not kwargs or isinstance(err, ConfigError):
            raise
        raise refused_kwargs(error=err, kwargs=kwargs, env_id=env_id) from err
    max_episode_steps = made.spec.max_episode_steps if made.spec is not None else None
    env: gym.Env = ContractChecked(made.unwrapped, env_id=env_id, seed=seed, actor_rank=actor_rank)
    if max_episode_steps is not None:
        env = TimeLimit(env, max_episode_steps=max_episode_steps)
    env = _SeedOnFirstReset(apply_wrappers(env=env, wrappers=wrappers), seed=seed)
    check_observation_space(space=env.observation_space, env_id=env_id)
    env.action_space.seed(seed)
    env.observation_space.seed(seed)
    logger.debug("made env %s (seed %d, actor rank %d, max_episode_steps %s)", env_id, seed, actor_rank,
                 max_episode_steps)
    return env


class _SeedOnFirstReset(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Uses `seed` for the first reset() that does not pass one; later resets continue the env's RNG."""

    def __init__(self, env: gym.Env, *, seed: int) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, seed=seed)
        gym.Wrapper.__init__(self, env)
        self._pending_seed: int | None = seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        return self.env.reset(seed=seed, options=options)


def _check_known(*, env_id: str) -> None:
    if env_id.startswith("nimbus/"):
        import nimbus.envs.atari  # noqa: F401  (registers nimbus/Atari<Game>-v5: ALE + preprocessing)
        import nimbus.envs.faults  # noqa: F401  (registers the fault-injection envs)
    if env_id in gym.registry:
        return
    candidates = sorted(set(gym.registry) | {info.env_id for info in list_envs()})
    matches = difflib.get_close_matches(env_id, candidates, n=5, cutoff=0.6)
    hint = f"close matches: {', '.join(matches)}" if matches else "run `nimbus envs` for the catalogue"
    raise ConfigError(f"unknown env id {env_id!r}; {hint}. An env your own module registers: list the module in "
                      "env.imports, or write env.id as module:EnvId")


def _missing_dependency(*, env_id: str, err: Exception) -> ConfigError:
    extra = required_extra(env_id=env_id)
    if extra is None:
        return ConfigError(f"env {env_id!r} cannot be built, a dependency is missing: {err}")
    return ConfigError(
        f"env {env_id!r} needs the {extra!r} extra, which is not installed here: "
        f"pip install nimbus-rl[{extra}]  (original error: {err})"
    )
