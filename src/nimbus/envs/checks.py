"""The env contract, checked on every reset and step: a violation is a bug in the env, so the run stops
naming the env, the actor rank, the seed and the step (P3, docs/reliability.md).

`ContractChecked` sits directly on the raw env (inside the time limit), so it sees exactly what the
env returns. It raises `EnvContractError` (never retried) when:

- the env speaks the old gym API (``step`` returns a 4-tuple, ``reset`` a bare observation);
- an observation does not have the observation space's shape and dtype;
- an observation or a reward is NaN or Inf.

Every message names the env id, the actor rank, the seed and the step, and what was expected.

Example::

    env = ContractChecked(gym.make("CartPole-v1").unwrapped, env_id="CartPole-v1", seed=0, actor_rank=3)
    obs, info = env.reset(seed=0)
"""

from __future__ import annotations

import re
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from nimbus.errors import ConfigError, EnvContractError
from nimbus.liveness import beat

OLD_STEP_API_HINT = (
    "this looks like the old gym API. Migrate to gymnasium's: `step` returns the 5-tuple "
    "(obs, reward, terminated, truncated, info) — `terminated` when the MDP reached a terminal state, "
    "`truncated` when a time limit or other outside cut ended the episode — instead of "
    "(obs, reward, done, info); see https://gymnasium.farama.org/introduction/migration_guide/"
)
OLD_RESET_API_HINT = (
    "this looks like the old gym API. Migrate to gymnasium's: `reset(*, seed=None, options=None)` "
    "returns (obs, info) instead of a bare obs; see https://gymnasium.farama.org/introduction/migration_guide/"
)


class ContractChecked(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Checks the gymnasium API, observation shape/dtype and finiteness on every reset and step."""

    def __init__(self, env: gym.Env, *, env_id: str, seed: int | None, actor_rank: int) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, env_id=env_id, seed=seed, actor_rank=actor_rank)
        gym.Wrapper.__init__(self, env)
        self._env_id = env_id
        self._seed = seed
        self._actor_rank = actor_rank
        self._episode = -1
        self._step = 0
        beat()  # building envs is progress too (a cold actor builds several before its first step)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        result = self.env.reset(seed=seed, options=options)
        beat()  # progress for the liveness check (P5)
        self._episode += 1
        self._step = 0
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
            raise EnvContractError(
                f"{self._where('reset')}: reset() returned {_describe(result)}; {OLD_RESET_API_HINT}")
        obs, info = result
        self._check_observation(obs=obs, where=self._where("reset"))
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        result = self.env.step(action)
        beat()
        self._step += 1
        where = self._where(f"step {self._step}")
        if not isinstance(result, tuple) or len(result) != 5:
            length = len(result) if isinstance(result, tuple) else None
            hint = (OLD_STEP_API_HINT if length == 4
                    else "gymnasium's step returns (obs, reward, terminated, truncated, info)")
            raise EnvContractError(f"{where}: step() returned {_describe(result)}; {hint}")
        obs, reward, terminated, truncated, info = result
        self._check_observation(obs=obs, where=where)
        self._check_reward(reward=reward, where=where)
        return obs, reward, terminated, truncated, info

    def _where(self, moment: str) -> str:
        return (
            f"env {self._env_id!r} (actor rank {self._actor_rank}, seed {self._seed}) "
            f"at {moment} of episode {max(self._episode, 0)}"
        )

    def _check_observation(self, *, obs: Any, where: str) -> None:
        space = self.observation_space
        if isinstance(space, gym.spaces.Box):
            check_box_observation(obs=obs, space=space, where=where)
        elif not space.contains(obs):
            raise EnvContractError(f"{where}: observation {obs!r} is not in the observation space {space}")

    def _check_reward(self, *, reward: Any, where: str) -> None:
        if not np.isscalar(reward) and np.ndim(reward) != 0:
            raise EnvContractError(f"{where}: reward must be a scalar, got {_describe(reward)}")
        value = float(reward)
        if not np.isfinite(value):
            raise EnvContractError(f"{where}: reward is {_non_finite_kind(np.asarray(value))} ({value})")


def check_box_observation(*, obs: Any, space: gym.spaces.Box, where: str) -> None:
    """Raise EnvContractError unless `obs` is a finite array with `space`'s shape and dtype."""
    if not isinstance(obs, np.ndarray):
        raise EnvContractError(
            f"{where}: observation is a {type(obs).__name__}, expected a numpy array of shape {space.shape} "
            f"dtype {space.dtype}"
        )
    if obs.shape != space.shape or obs.dtype != space.dtype:
        raise EnvContractError(
            f"{where}: observation has shape {obs.shape} dtype {obs.dtype}, expected shape {space.shape} "
            f"dtype {space.dtype} (observation_space {space})"
        )
    if np.issubdtype(obs.dtype, np.floating) and not np.isfinite(obs).all():
        bad = np.flatnonzero(~np.isfinite(obs.ravel()))
        raise EnvContractError(
            f"{where}: observation contains {_non_finite_kind(obs)} at flat index {bad[:8].tolist()}"
        )


def _non_finite_kind(values: np.ndarray) -> str:
    has_nan = bool(np.isnan(values).any())
    has_inf = bool(np.isinf(values).any())
    return "NaN and Inf" if has_nan and has_inf else "NaN" if has_nan else "Inf"


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a {len(value)}-tuple"
    if isinstance(value, np.ndarray):
        return f"a bare array of shape {value.shape}"
    return f"a {type(value).__name__}"


_UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '([^']+)'")


class UnknownEnvKwarg(ConfigError, TypeError):
    """An ``env.kwargs`` key the env's constructor does not take: a ConfigError (exit 2, naming the key) that
    is also the constructor's TypeError, so code probing an optional keyword (``render_mode`` for video)
    still catches it and falls back."""


def unknown_kwarg(*, error: TypeError, kwargs: dict[str, Any], env_id: str) -> UnknownEnvKwarg | None:
    """The error naming ``env.kwargs.<key>`` for an env constructor's TypeError about one of ``kwargs``; None
    when the TypeError is about something else (then it is the env's own bug: re-raise it)."""
    match = _UNEXPECTED_KEYWORD.search(str(error))
    if match is None or match.group(1) not in kwargs:
        return None
    return UnknownEnvKwarg(f"env.kwargs.{match.group(1)}: {env_id} takes no argument {match.group(1)!r} "
                       f"(its constructor: {error})")


class EnvRefusedKwargs(ConfigError):
    """The env's constructor raised on the ``env.kwargs`` it was given (a value it does not take: an assert, a
    ValueError): a ConfigError (exit 2) naming them and the env's own error, so a sweep that drew the value fails
    that trial once and goes on."""


def refused_kwargs(*, error: Exception, kwargs: dict[str, Any], env_id: str) -> EnvRefusedKwargs:
    """The error for an env constructor that raised ``error`` when given ``kwargs``."""
    shown = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
    first = (str(error).strip().splitlines() or [""])[0][:300]
    return EnvRefusedKwargs(f"env.kwargs: {env_id} could not be built with {shown} ({type(error).__name__}: {first})")
