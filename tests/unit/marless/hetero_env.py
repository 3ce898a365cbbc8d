"""The coordination game of tests/unit/marless/coord_env.py with agents that differ: observation sizes and an
action mask, for value-based MARL on heterogeneous agents (VDN, QMIX, IQL).

``scout`` sees one-hot(s) ⊕ t/H (4 numbers) and has Discrete(3) actions; ``runner`` sees one-hot(s) ⊕ t/H ⊕ three
constant numbers (7) and has Discrete(4) actions, of which ``infos["runner"]["action_mask"]`` allows two: s + 1
and (s + 2) mod 3 are legal; 3 and s never are. The team scores 1 (0.5 to each agent) when scout plays s and runner
plays s + 1 (mod 3); episodes last ``horizon`` (5) steps and terminate. ``state()`` is one-hot(s) ⊕ t/H.
``illegal`` counts the runner's illegal actions (the env also gives −1 for one).

Per-agent episode return: optimum 0.5 · H = 2.5; uniform play among the legal actions 0.5 · H / 6 ≈ 0.42.

Example (as a run's env): ``env.id: tests.unit.marless.hetero_env:make_env``, ``env.kwargs: {horizon: 5}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

AGENTS = ("runner", "scout")


def legal(s: int) -> tuple[int, int]:
    """The runner's legal actions when the hidden value is s."""
    return (s + 1) % 3, (s + 2) % 3


class HeteroCoordination(ParallelEnv):
    metadata = {"name": "hetero_coordination_v0"}

    def __init__(self, *, horizon: int = 5) -> None:
        self.possible_agents = list(AGENTS)
        self.horizon = horizon
        self.agents: list[str] = []
        self.t, self.s, self.illegal = 0, 0, 0
        self.rng = np.random.default_rng(0)
        self._obs_spaces = {"scout": spaces.Box(0.0, 1.0, (4,), np.float32),
                            "runner": spaces.Box(0.0, 1.0, (7,), np.float32)}
        self._action_spaces = {"scout": spaces.Discrete(3), "runner": spaces.Discrete(4)}

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_spaces[agent]

    def state(self) -> np.ndarray:
        out = np.zeros(4, np.float32)
        out[self.s], out[3] = 1.0, self.t / self.horizon
        return out

    def _observe(self, live: list[str]) -> tuple[dict, dict]:
        mask = np.zeros(4, np.int8)
        mask[list(legal(self.s))] = 1
        obs = {"scout": self.state(), "runner": np.concatenate([self.state(), np.full(3, 0.5, np.float32)])}
        return {a: obs[a] for a in live}, {a: ({"action_mask": mask} if a == "runner" else {}) for a in live}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t, self.s = list(AGENTS), 0, int(self.rng.integers(3))
        return self._observe(self.agents)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        runner = int(actions["runner"])
        self.illegal += runner not in legal(self.s)
        success = int(actions["scout"]) == self.s and runner == (self.s + 1) % 3
        reward = -1.0 if runner not in legal(self.s) else 0.5 * success
        self.t += 1
        self.s = int(self.rng.integers(3))
        done = self.t >= self.horizon
        live, self.agents = list(self.agents), [] if done else list(self.agents)
        obs, infos = self._observe(live)
        return obs, dict.fromkeys(live, reward), dict.fromkeys(live, done), dict.fromkeys(live, False), infos


def make_env(*, horizon: int = 5) -> HeteroCoordination:
    return HeteroCoordination(horizon=horizon)
