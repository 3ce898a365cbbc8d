"""A PettingZoo Parallel env with the observation and action spaces a test asks for, for the refusals of spaces the
multi-agent networks do not read and the scaling of uint8 images.

Two agents, ``a`` and ``b``; ``obs``: ``box`` (Box(0, 1, (3,))), ``discrete`` (Discrete(5)), ``dict`` (a Dict of
``pos`` and ``vel``), ``image`` (Box(0, 255, (8, 8, 3), uint8): every pixel 255 at reset, 0 after a step) or
``masked`` (PettingZoo's {"observation", "action_mask"} Dict: a Box and a mask allowing every action); ``action``:
``discrete`` (Discrete(3)) or ``multidiscrete`` (MultiDiscrete([2, 3])). Reward 1 a step, truncated after 5 steps.
The class defines no get_state() / set_state(): ``actors.restore_slots`` must refuse it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

BOX = spaces.Box(0.0, 1.0, (3,), np.float32)
OBSERVATIONS = {"box": BOX, "discrete": spaces.Discrete(5),
                "dict": spaces.Dict({"pos": spaces.Box(0.0, 1.0, (2,), np.float32),
                                     "vel": spaces.Box(0.0, 1.0, (2,), np.float32)}),
                "image": spaces.Box(0, 255, (8, 8, 3), np.uint8),
                "masked": spaces.Dict({"observation": BOX, "action_mask": spaces.Box(0, 1, (3,), np.int8)})}
ACTIONS = {"discrete": spaces.Discrete(3), "multidiscrete": spaces.MultiDiscrete([2, 3])}


class SpaceEnv(ParallelEnv):
    metadata = {"name": "space_env_v0"}

    def __init__(self, *, obs: str = "box", action: str = "discrete") -> None:
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []
        self.t = 0
        self._obs, self._action = OBSERVATIONS[obs], ACTIONS[action]

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs

    def action_space(self, agent: str) -> spaces.Space:
        return self._action

    def _observe(self, live: list[str]) -> dict[str, Any]:
        if isinstance(self._obs, spaces.Dict) and "action_mask" in self._obs.spaces:
            one = {"observation": np.full(3, 0.5, np.float32), "action_mask": np.ones(3, np.int8)}
        elif isinstance(self._obs, spaces.Box) and self._obs.dtype == np.uint8:
            one = np.full(self._obs.shape, 255 if self.t == 0 else 0, np.uint8)
        else:
            one = self._obs.sample()
        return dict.fromkeys(live, one)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        self.agents, self.t = list(self.possible_agents), 0
        return self._observe(self.agents), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        live, done = list(self.agents), self.t >= 5
        if done:
            self.agents = []
        return (self._observe(live), dict.fromkeys(live, 1.0), dict.fromkeys(live, False), dict.fromkeys(live, done),
                {a: {} for a in live})


def make_env(**kwargs: Any) -> SpaceEnv:
    return SpaceEnv(**kwargs)
