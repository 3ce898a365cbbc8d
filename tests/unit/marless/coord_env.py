"""The coordination game of tests/unit/marless/test_marless_value_learner.py as a PettingZoo Parallel env with a
global state, for runs of the whole MARLess workflow (VDN, QMIX).

Two agents, ``agent_0`` and ``agent_1``; each step a hidden s ∈ {0, 1, 2} is drawn and both agents see
one-hot(s) ⊕ t/H; actions Discrete(3). The team scores 1 (0.5 to each agent) when agent_0 plays s and agent_1
plays s + 1 (mod 3), else 0; episodes last ``horizon`` (5) steps and terminate. ``state()`` is the same
one-hot(s) ⊕ t/H; with ``stateless: true`` the env has no state() (QMIX refuses it). ``reward`` (0.5) is what
each agent scores on success (a huge one, 1e38, overflows a learner's loss: the non-finite guard's test).

Per-agent episode return: optimum 0.5 · H = 2.5; uniform-random play 0.5 · H / 9 ≈ 0.28.

Example (as a run's env): ``env.id: tests.unit.marless.coord_env:make_env``, ``env.kwargs: {horizon: 5}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

AGENTS = ("agent_0", "agent_1")


class Coordination(ParallelEnv):
    metadata = {"name": "coordination_v0"}

    def __init__(self, *, horizon: int = 5, reward: float = 0.5) -> None:
        self.possible_agents = list(AGENTS)
        self.horizon, self.reward = horizon, reward
        self.agents: list[str] = []
        self.t, self.s = 0, 0
        self.rng = np.random.default_rng(0)
        self._obs_space, self._action_space = spaces.Box(0.0, 1.0, (4,), np.float32), spaces.Discrete(3)

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def _obs(self) -> np.ndarray:
        out = np.zeros(4, np.float32)
        out[self.s], out[3] = 1.0, self.t / self.horizon
        return out

    def state(self) -> np.ndarray:
        return self._obs()

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t, self.s = list(AGENTS), 0, int(self.rng.integers(3))
        return {a: self._obs() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        success = int(actions["agent_0"]) == self.s and int(actions["agent_1"]) == (self.s + 1) % 3
        self.t += 1
        self.s = int(self.rng.integers(3))
        done = self.t >= self.horizon
        live, self.agents = list(self.agents), [] if done else list(self.agents)
        return ({a: self._obs() for a in live}, {a: self.reward * success for a in live}, {a: done for a in live},
                {a: False for a in live}, {a: {} for a in live})


class Stateless(Coordination):
    """The same game without a global state."""

    def state(self) -> np.ndarray:
        raise NotImplementedError


def make_env(*, horizon: int = 5, stateless: bool = False, reward: float = 0.5) -> Coordination:
    return (Stateless if stateless else Coordination)(horizon=horizon, reward=reward)
