"""Helpers of the env tests: two envs that must continue alike, step for step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


def assert_continue_alike(*, a: gym.Env, b: gym.Env, steps: int) -> None:
    """``a`` and ``b`` draw the same random actions and return the same steps, rewards, ends and resets for
    ``steps`` steps (the action spaces' generators travel in a snapshot too)."""
    for _ in range(steps):
        action, other = a.action_space.sample(), b.action_space.sample()
        np.testing.assert_array_equal(np.asarray(action), np.asarray(other))
        got_a, got_b = a.step(action), b.step(action)
        np.testing.assert_array_equal(got_a[0], got_b[0])
        assert got_a[1:4] == got_b[1:4]
        if got_a[2] or got_a[3]:
            np.testing.assert_array_equal(a.reset()[0], b.reset()[0])
