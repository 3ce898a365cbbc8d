"""A PettingZoo Parallel env whose action masks forbid half the actions at every step, for the action-mask tests.

Two agents, ``a`` (index 0) and ``b`` (index 1); Discrete(4) actions; observation (t, agent index, 1) as float32,
so a test can recompute the legal actions from the observation alone: at step t agent i may take
``legal(t, i)`` = {(t + i) % 4, (t + i + 1) % 4}. Reward: 1 for the larger legal action, 0 for the other legal one,
−1 for an illegal action (counted in ``illegal``). Both agents are truncated after ``horizon`` steps.

``convention``: ``"obs"`` gives PettingZoo's Dict observation {"observation", "action_mask"}; ``"info"`` gives a
plain observation and ``infos[agent]["action_mask"]``.

Example (as a run's env): ``env.id: tests.unit.marless.masked_env:make_env``, ``env.kwargs: {convention: obs}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

AGENTS = ("a", "b")
ACTIONS = 4


def legal(t: int, index: int) -> tuple[int, int]:
    return (t + index) % ACTIONS, (t + index + 1) % ACTIONS


def mask_of(t: int, index: int) -> np.ndarray:
    mask = np.zeros(ACTIONS, np.int8)
    mask[list(legal(t, index))] = 1
    return mask


class MaskedTurns(ParallelEnv):
    metadata = {"name": "masked_turns_v0"}

    def __init__(self, *, horizon: int = 10, convention: str = "obs") -> None:
        self.possible_agents = list(AGENTS)
        self.horizon, self.convention = horizon, convention
        self.agents: list[str] = []
        self.t, self.illegal = 0, 0
        self._plain = spaces.Box(0.0, float(horizon), (3,), np.float32)
        self._dict = spaces.Dict({"observation": self._plain, "action_mask": spaces.Box(0, 1, (ACTIONS,), np.int8)})
        self._action_space = spaces.Discrete(ACTIONS)

    def observation_space(self, agent: str) -> spaces.Space:
        return self._dict if self.convention == "obs" else self._plain

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def _observe(self) -> tuple[dict, dict]:
        obs, infos = {}, {}
        for agent in self.agents:
            i = AGENTS.index(agent)
            plain = np.array([self.t, i, 1.0], np.float32)
            if self.convention == "obs":
                obs[agent], infos[agent] = {"observation": plain, "action_mask": mask_of(self.t, i)}, {}
            else:
                obs[agent], infos[agent] = plain, {"action_mask": mask_of(self.t, i)}
        return obs, infos

    def get_state(self) -> dict[str, np.ndarray]:       # the snapshot contract (actors.restore_slots)
        return {"t": np.array(self.t), "illegal": np.array(self.illegal)}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self.t, self.illegal = int(state["t"]), int(state["illegal"])

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        self.agents, self.t = list(AGENTS), 0
        return self._observe()

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        rewards = {}
        for agent in self.agents:
            options = legal(self.t, AGENTS.index(agent))
            action = int(actions[agent])
            self.illegal += action not in options
            rewards[agent] = -1.0 if action not in options else float(action == max(options))
        self.t += 1
        done = self.t >= self.horizon
        obs, infos = self._observe()
        live = list(self.agents)
        if done:
            self.agents = []
        return obs, rewards, dict.fromkeys(live, False), dict.fromkeys(live, done), infos


def make_env(**kwargs: Any) -> MaskedTurns:
    return MaskedTurns(**kwargs)
