"""Env snapshots (exact resume): a restored env continues bitwise like the one it was taken from — steps,
rewards, terminations, resets and random samples — for classic-control and MuJoCo envs; others refuse."""

from __future__ import annotations

import json

import pytest

from nimbus.envs.make import make_env
from nimbus.envs.snapshot import SnapshotUnsupported, capture, restore
from tests.unit.envs.env_helpers import assert_continue_alike


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "Hopper-v5"])
def test_a_restored_env_continues_exactly(env_id: str) -> None:
    a = make_env(env_id=env_id, seed=3)
    a.reset()
    for _ in range(11):
        obs, _, terminated, truncated, _ = a.step(a.action_space.sample())
        if terminated or truncated:
            a.reset()
    arrays, meta = capture(env=a)
    json.dumps(meta)  # the JSON part really is JSON
    b = make_env(env_id=env_id, seed=99)  # another seed: everything must come from the snapshot
    b.reset()
    restore(env=b, arrays=arrays, meta=meta)
    assert_continue_alike(a=a, b=b, steps=400)


def test_an_env_without_a_known_state_is_refused() -> None:
    env = make_env(env_id="FrozenLake-v1", seed=0,  # toy_text ships with gymnasium itself
                   wrappers=("gymnasium.wrappers.FlattenObservation",))
    env.reset()
    with pytest.raises(SnapshotUnsupported, match="classic-control and MuJoCo envs"):
        capture(env=env)
