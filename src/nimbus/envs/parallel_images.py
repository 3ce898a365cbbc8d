"""uint8 observations of a multi-agent env scaled to [0, 1]: what every multi-agent network reads.

The multi-agent networks (algos/multiagent/) are MLPs over the flattened observation; there is no CNN path for
them. An image's raw 0..255 values would enter that MLP a few hundred times larger than the [0, 1] a network
initialised for unit-scale inputs expects, so an agent whose observation space is a uint8 Box sees it as float32
/ 255 with the bounds scaled alike (`ScaleUint8Observations`, applied by envs/parallel.py's ``make_parallel_env``),
everywhere: the actors, the learners' rows, evaluation and the global state built from observations. Other agents
pass through unchanged.

Example::

    env = scale_uint8_observations(env=raw)      # raw: agent "cam" sees Box(0, 255, (8, 8, 3), uint8)
    env.observation_space("cam")                 # Box(0.0, 1.0, (8, 8, 3), float32)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

PIXEL_MAX = 255.0


def is_uint8_box(*, space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8


class ScaleUint8Observations(BaseParallelWrapper):
    """Each uint8 Box observation as float32 / 255 (its space's bounds too); other agents' pass through."""

    def __init__(self, env: ParallelEnv) -> None:
        super().__init__(env)
        self.possible_agents = list(env.possible_agents)
        self._scaled: dict[str, gym.spaces.Box] = {}
        for agent in self.possible_agents:
            space = env.observation_space(agent)
            if is_uint8_box(space=space):
                self._scaled[agent] = gym.spaces.Box(low=(space.low / PIXEL_MAX).astype(np.float32),
                                                     high=(space.high / PIXEL_MAX).astype(np.float32),
                                                     dtype=np.float32)

    @property
    def agents(self) -> list[str]:
        return list(self.env.agents)

    def observation_space(self, agent: str) -> gym.Space:
        return self._scaled.get(agent) or self.env.observation_space(agent)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._scale(obs=obs), infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        return self._scale(obs=obs), rewards, terminations, truncations, infos

    def _scale(self, *, obs: dict[str, Any]) -> dict[str, Any]:
        return {agent: (np.asarray(value, dtype=np.float32) / np.float32(PIXEL_MAX) if agent in self._scaled
                        else value) for agent, value in obs.items()}


def scale_uint8_observations(*, env: ParallelEnv) -> ParallelEnv:
    """``env`` in `ScaleUint8Observations` when an agent observes a uint8 Box, else ``env``."""
    if any(is_uint8_box(space=env.observation_space(agent)) for agent in env.possible_agents):
        return ScaleUint8Observations(env)
    return env
