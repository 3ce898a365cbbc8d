"""A PettingZoo Parallel env whose agents finish at different steps (issue 27 fix 1), for the MARLess tests.

Two agents, ``long`` and ``short``; observation (step / horizon, agent id, 1); actions Discrete(2), reward 1 for
action 1, else 0. ``short`` terminates after step ``short_steps`` (3), ``long`` is truncated after ``horizon``
(10): from step 4 to 10 the actor writes padding rows for ``short``, 70 % of its rows.

Example (as a run's env): ``env.id: tests.unit.marless.early_env:make_env``, ``env.kwargs: {short_steps: 3}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

AGENTS = ("long", "short")


class EarlyDone(ParallelEnv):
    metadata = {"name": "early_done_v0"}

    def __init__(self, *, horizon: int = 10, short_steps: int = 3) -> None:
        self.possible_agents = list(AGENTS)
        self.horizon, self.short_steps = horizon, short_steps
        self.agents: list[str] = []
        self.t = 0
        self._obs_space, self._action_space = spaces.Box(-1.0, 2.0, (3,), np.float32), spaces.Discrete(2)

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.t / self.horizon, AGENTS.index(agent), 1.0], np.float32)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        self.agents, self.t = list(AGENTS), 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        live = list(self.agents)
        obs = {a: self._obs(a) for a in live}
        rewards = {a: float(int(actions[a]) == 1) for a in live}
        terminated = {a: a == "short" and self.t >= self.short_steps for a in live}
        truncated = {a: a == "long" and self.t >= self.horizon for a in live}
        self.agents = [a for a in live if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, {a: {} for a in live}


def make_env(**kwargs: Any) -> EarlyDone:
    return EarlyDone(**kwargs)
