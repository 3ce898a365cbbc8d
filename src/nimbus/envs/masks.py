"""Action masks of multi-agent envs, in PettingZoo's two conventions, brought to one place:
``infos[agent]["action_mask"]``.

PettingZoo envs give an agent's legal actions either inside a Dict observation, ``{"observation": ...,
"action_mask": ...}`` (pettingzoo.classic), or in the step's ``infos[agent]["action_mask"]``. `SplitActionMask`
(applied by envs/parallel.py's ``make_parallel_env`` when an agent's observation space is such a Dict) gives the
rest of nimbus the plain observation (its space is the Dict's ``observation`` entry) and moves the mask into the
agent's info, so every reader finds masks in one place (`masks_from`). An env without masks is left untouched.

The contract (checked per reset and step by envs/parallel.py's contract checker, `check_mask`): a mask is a flat
array of 0/1 (or bools) with one entry per action of a Discrete action space, and it allows at least one action.
Which agents are masked is fixed by the env's first reset: a masked agent then carries a mask whenever it is live.

Example::

    env = make_parallel_env(env_id="pkg.board:make", seed=0, kwargs={})
    obs, infos = env.reset()
    masks = masks_from(infos=infos)      # {"player_0": array([True, False, ...]), ...}
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from nimbus.errors import EnvContractError

MASK_KEY = "action_mask"
OBSERVATION_KEY = "observation"


def is_masked_dict(*, space: gym.Space) -> bool:
    """Whether ``space`` is PettingZoo's masked observation: a Dict of ``observation`` and ``action_mask``."""
    return isinstance(space, gym.spaces.Dict) and set(space.spaces) == {OBSERVATION_KEY, MASK_KEY}


def masks_from(*, infos: dict[str, Any]) -> dict[str, np.ndarray]:
    """Each agent's mask in ``infos`` as a bool array (agents without one are left out)."""
    return {agent: np.asarray(info[MASK_KEY]).astype(bool)
            for agent, info in infos.items() if isinstance(info, dict) and MASK_KEY in info}


def check_mask(*, mask: Any, space: gym.Space, where: str) -> None:
    """Raise EnvContractError unless ``mask`` is a 0/1 vector over ``space``'s actions allowing at least one."""
    if not isinstance(space, gym.spaces.Discrete):
        raise EnvContractError(f"{where}: an action mask needs a Discrete action space, got {space}")
    values = np.asarray(mask)
    if values.shape != (int(space.n),):
        raise EnvContractError(f"{where}: action_mask has shape {values.shape}, expected ({int(space.n)},) for {space}")
    if not np.isin(values, (0, 1)).all():
        raise EnvContractError(f"{where}: action_mask holds values other than 0 and 1: {values.tolist()}")
    if not values.any():
        raise EnvContractError(f"{where}: action_mask allows no action; a live agent needs at least one legal action")


class SplitActionMask(BaseParallelWrapper):
    """The Dict ``{"observation", "action_mask"}`` observations of an env as the plain observation, with the mask in
    ``infos[agent]["action_mask"]``; agents whose space is not such a Dict pass through."""

    def __init__(self, env: ParallelEnv) -> None:
        super().__init__(env)
        self.possible_agents = list(env.possible_agents)
        self._split = {agent for agent in self.possible_agents if is_masked_dict(space=env.observation_space(agent))}

    @property
    def agents(self) -> list[str]:
        return list(self.env.agents)

    def observation_space(self, agent: str) -> gym.Space:
        space = self.env.observation_space(agent)
        return space[OBSERVATION_KEY] if agent in self._split else space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._move(obs=obs, infos=infos)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        obs, infos = self._move(obs=obs, infos=infos)
        return obs, rewards, terminations, truncations, infos

    def _move(self, *, obs: dict[str, Any], infos: dict[str, Any]) -> tuple[dict, dict]:
        out_obs, out_infos = dict(obs), dict(infos)
        for agent in self._split.intersection(obs):
            value = obs[agent]
            out_obs[agent] = value[OBSERVATION_KEY]
            out_infos[agent] = {**(infos.get(agent) or {}), MASK_KEY: value[MASK_KEY]}
        return out_obs, out_infos


def split_masks(*, env: ParallelEnv) -> ParallelEnv:
    """``env`` in `SplitActionMask` when an agent's observation space is PettingZoo's masked Dict, else ``env``."""
    if any(is_masked_dict(space=env.observation_space(agent)) for agent in env.possible_agents):
        return SplitActionMask(env)
    return env
