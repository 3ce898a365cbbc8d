"""Multi-agent envs through PettingZoo's Parallel API, with the env contract checked per agent (MARLess §4.1).

An env id is either a catalogued mpe2 env, ``mpe2:simple_spread_v3`` → ``mpe2.simple_spread_v3.parallel_env(**kwargs)``,
or a user's factory, ``pkg.module:factory`` → ``factory(**kwargs)`` returning a PettingZoo ``ParallelEnv`` (or an
``AECEnv`` that declares ``is_parallelizable``, converted by envs/aec.py).
mpe2 imports pygame when it loads, so the headless settings (``SDL_VIDEODRIVER=dummy``,
``PYGAME_HIDE_SUPPORT_PROMPT=1``) are set (unless already set) before any import.

`make_parallel_env` wraps the env in `ContractCheckedParallel`, which raises `EnvContractError` (never
retried) naming the env, the agent and the step when:

- a reset or step dict (observations, rewards, terminations, truncations, infos) does not hold exactly the
  live agents (the agents that acted, plus any agent that appeared in ``env.agents`` during the step);
- an agent's observation or action space differs from the one it had when the env was built;
- an observation does not fit its agent's space (shape and dtype for Box spaces), or is NaN/Inf;
- a reward is not a finite scalar;
- an action mask (envs/masks.py) is malformed or allows no action, or a live agent that had one at the first reset
  has none.

An env whose observations are PettingZoo's masked Dicts (``{"observation", "action_mask"}``) is first wrapped in
envs/masks.py's ``SplitActionMask``: its agents' observations are the ``observation`` entries and their masks are in
``infos[agent]["action_mask"]``, as in envs that give them there. ``mask_agents`` (after the first reset) names the
agents with masks. An agent that observes a uint8 Box (an image) sees it as float32 / 255
(envs/parallel_images.py): the multi-agent networks are MLPs, with no CNN path.

Example::

    env = make_parallel_env(env_id="mpe2:simple_spread_v3", seed=0, kwargs={"N": 3, "max_cycles": 25})
    obs, infos = env.reset()                       # the first reset without a seed uses ``seed``
    spaces = agent_spaces(env=env)                 # {"agent_0": EnvSpaces(...), ...}
    state = global_state(env=env)                  # env.state(), else the agents' obs concatenated
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from nimbus.envs.aec import parallel_from_aec
from nimbus.envs.checks import check_box_observation, unknown_kwarg
from nimbus.envs.custom import import_modules, resolve
from nimbus.envs.masks import check_mask, masks_from, split_masks
from nimbus.envs.parallel_images import scale_uint8_observations
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError, EnvContractError
from nimbus.liveness import beat

CATALOGUE = ("mpe2:simple_spread_v3", "mpe2:simple_adversary_v3", "mpe2:simple_tag_v3")
STEP_DICTS = ("observations", "rewards", "terminations", "truncations", "infos")


def make_parallel_env(*, env_id: str, seed: int, kwargs: dict[str, Any],
                      imports: Sequence[str] = ()) -> ContractCheckedParallel:
    """The env ``env_id`` built with ``kwargs``, inside the contract checker; its first unseeded reset uses ``seed``."""
    import_modules(modules=imports, key="env.imports")
    raw = build_raw_env(env_id=env_id, kwargs=kwargs)
    return ContractCheckedParallel(scale_uint8_observations(env=split_masks(env=raw)), env_id=env_id, seed=seed)


def build_raw_env(*, env_id: str, kwargs: dict[str, Any]) -> ParallelEnv:
    """The unchecked env: ``mpe2:<name>`` from mpe2, else ``pkg.module:factory`` called with ``kwargs``."""
    if ":" not in env_id:
        raise ConfigError(f"env.id: {env_id!r} is not a multi-agent env id; write mpe2:<env> "
                          f"(one of {list(CATALOGUE)}) or pkg.module:factory")
    module_name, name = env_id.split(":", 1)
    if module_name == "mpe2":
        factory = _mpe2_factory(name=name)
    else:
        factory = resolve(ref=env_id, key="env.id")
    try:
        env = factory(**kwargs)
    except TypeError as err:   # an env.kwargs key the factory does not take: exit 2 naming it
        raise unknown_kwarg(error=err, kwargs=kwargs, env_id=env_id) or err from None
    env = parallel_from_aec(env=env, env_id=env_id)   # an AEC env: converted where it declares it safe
    if not isinstance(env, ParallelEnv):
        raise ConfigError(f"env.id: {env_id!r} returned a {type(env).__name__}, not a PettingZoo ParallelEnv")
    return env


def _mpe2_factory(*, name: str) -> Any:
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")   # pygame loads with mpe2: headless
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        module = importlib.import_module(f"mpe2.{name}")
    except ImportError as err:
        raise ConfigError(f"env.id: mpe2:{name} cannot be imported ({err}); install the extra: "
                          f"pip install 'nimbus[mpe]'; catalogued: {list(CATALOGUE)}") from err
    return module.parallel_env


def agent_spaces(*, env: ParallelEnv) -> dict[str, EnvSpaces]:
    """Each possible agent's observation and action space."""
    return {agent: EnvSpaces(observation=env.observation_space(agent), action=env.action_space(agent))
            for agent in env.possible_agents}


def global_state(*, env: ParallelEnv) -> np.ndarray:
    """``env.state()`` as float32; for an env without one, the agents' latest observations concatenated in
    ``possible_agents`` order (zeros for an agent that has none), which needs the contract checker."""
    try:
        return np.asarray(env.state(), dtype=np.float32).reshape(-1)
    except NotImplementedError:
        pass
    latest = getattr(env, "latest_observations", None)
    if latest is None:
        raise EnvContractError(f"env {type(env).__name__} has no state(); wrap it with make_parallel_env so the "
                               "agents' observations stand in for the global state")
    parts = []
    for agent in env.possible_agents:
        shape = env.observation_space(agent).shape
        obs = latest.get(agent)
        parts.append(np.zeros(int(np.prod(shape)), np.float32) if obs is None
                     else np.asarray(obs, dtype=np.float32).reshape(-1))
    return np.concatenate(parts)


class ContractCheckedParallel(BaseParallelWrapper):
    """Checks every reset and step of a Parallel env per agent; see the module docstring."""

    def __init__(self, env: ParallelEnv, *, env_id: str, seed: int | None) -> None:
        super().__init__(env)
        self.env_id = env_id
        self.base_seed = seed
        self._episode = -1
        self._step = 0
        self._seeded = False
        self.possible_agents = list(env.possible_agents)
        self._spaces = {agent: (env.observation_space(agent), env.action_space(agent))
                        for agent in self.possible_agents}
        self.latest_observations: dict[str, np.ndarray] = {}
        self.mask_agents: frozenset[str] | None = None   # the agents with action masks, from the first reset
        beat()

    @property
    def agents(self) -> list[str]:
        return list(self.env.agents)

    def observation_space(self, agent: str) -> gym.Space:
        return self._spaces[agent][0] if agent in self._spaces else self.env.observation_space(agent)

    def action_space(self, agent: str) -> gym.Space:
        return self._spaces[agent][1] if agent in self._spaces else self.env.action_space(agent)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is None and not self._seeded:
            seed = self.base_seed
        self._seeded = True
        obs, infos = self.env.reset(seed=seed, options=options)
        beat()
        self._episode += 1
        self._step = 0
        live = list(self.env.agents)
        where = self._where("reset")
        self._check_keys(dicts={"observations": obs, "infos": infos}, expected=live, where=where)
        self._check_spaces(agents=live, where=where)
        for agent in live:
            self._check_observation(agent=agent, obs=obs[agent], where=where)
        masks = masks_from(infos=infos)
        if self.mask_agents is None:
            self.mask_agents = frozenset(agent for agent in masks if agent in live)
        self._check_masks(masks=masks, live=live, where=where)
        self.latest_observations = dict(obs)
        return obs, infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        before = list(self.env.agents)
        result = self.env.step(actions)
        beat()
        self._step += 1
        where = self._where(f"step {self._step}")
        if not isinstance(result, tuple) or len(result) != 5:
            raise EnvContractError(f"{where}: step() must return (observations, rewards, terminations, truncations, "
                                   f"infos), got {type(result).__name__}")
        expected = before + [agent for agent in self.env.agents if agent not in before]
        self._check_keys(dicts=dict(zip(STEP_DICTS, result)), expected=expected, where=where)
        self._check_spaces(agents=expected, where=where)
        obs, rewards = result[0], result[1]
        for agent in expected:
            self._check_observation(agent=agent, obs=obs[agent], where=where)
            self._check_reward(agent=agent, reward=rewards[agent], where=where)
        self._check_masks(masks=masks_from(infos=result[4]), live=list(self.env.agents), where=where)
        self.latest_observations.update(obs)
        return result

    def _where(self, moment: str) -> str:
        return f"env {self.env_id!r} (seed {self.base_seed}) at {moment} of episode {max(self._episode, 0)}"

    def _check_keys(self, *, dicts: dict[str, Any], expected: list[str], where: str) -> None:
        wanted = set(expected)
        for name, values in dicts.items():
            if not isinstance(values, dict):
                raise EnvContractError(f"{where}: {name} is a {type(values).__name__}, expected a dict per agent")
            missing = [agent for agent in expected if agent not in values]
            if missing:
                raise EnvContractError(f"{where}: agent {missing[0]!r} is live but missing from {name} "
                                       f"(live agents {expected}, {name} holds {sorted(values)})")
            extra = sorted(str(agent) for agent in values if agent not in wanted)
            if extra:
                raise EnvContractError(f"{where}: agent {extra[0]!r} is in {name} but not live "
                                       f"(live agents {expected})")

    def _check_spaces(self, *, agents: list[str], where: str) -> None:
        for agent in agents:
            if agent not in self._spaces:
                raise EnvContractError(f"{where}: agent {agent!r} is not one of possible_agents {self.possible_agents}")
            obs_space, act_space = self._spaces[agent]
            now_obs, now_act = self.env.observation_space(agent), self.env.action_space(agent)
            # the same object is the same space: Box equality (np.isclose on the bounds) was 10 % of an IPPO run
            if now_obs is not obs_space and now_obs != obs_space:
                raise EnvContractError(f"{where}: agent {agent!r}'s observation space changed from {obs_space} to "
                                       f"{self.env.observation_space(agent)}; spaces must never change")
            if now_act is not act_space and now_act != act_space:
                raise EnvContractError(f"{where}: agent {agent!r}'s action space changed from {act_space} to "
                                       f"{self.env.action_space(agent)}; spaces must never change")

    def _check_masks(self, *, masks: dict[str, np.ndarray], live: list[str], where: str) -> None:
        for agent in live:
            if agent in masks:
                check_mask(mask=masks[agent], space=self._spaces[agent][1], where=f"{where}, agent {agent!r}")
            elif agent in (self.mask_agents or ()):
                raise EnvContractError(f"{where}, agent {agent!r}: live but its info has no action_mask, which it had "
                                       "at the first reset; a masked agent needs a mask at every step it is live")

    def _check_observation(self, *, agent: str, obs: Any, where: str) -> None:
        space = self._spaces[agent][0]
        at = f"{where}, agent {agent!r}"
        if isinstance(space, gym.spaces.Box):
            check_box_observation(obs=obs, space=space, where=at)
        elif not space.contains(obs):
            raise EnvContractError(f"{at}: observation {obs!r} is not in the observation space {space}")

    def _check_reward(self, *, agent: str, reward: Any, where: str) -> None:
        at = f"{where}, agent {agent!r}"
        if np.ndim(reward) != 0:
            raise EnvContractError(f"{at}: reward must be a scalar, got shape {np.shape(reward)}")
        value = float(reward)
        if not np.isfinite(value):
            raise EnvContractError(f"{at}: reward is not finite ({value})")
