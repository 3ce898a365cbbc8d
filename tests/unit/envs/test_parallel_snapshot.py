"""envs/parallel_snapshot.py: an mpe2 env restored from a snapshot (meta through JSON, as the codec carries it)
steps exactly as the env it was taken from, through episode ends and the resets that draw from its generator."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pettingzoo.utils.env import ParallelEnv
from gymnasium import spaces

from nimbus.envs.parallel import CATALOGUE, make_parallel_env
from nimbus.envs.parallel_snapshot import capture_parallel, restore_parallel
from nimbus.envs.snapshot import SnapshotUnsupported

pytest.importorskip("mpe2", reason="needs the [mpe] extra")


def _actions(env, rng: np.random.Generator) -> dict:
    return {agent: int(rng.integers(env.action_space(agent).n)) for agent in env.agents}


def _advance(env, rng: np.random.Generator, steps: int) -> None:
    for _ in range(steps):
        env.step(_actions(env, rng)) if env.agents else env.reset()


@pytest.mark.parametrize("env_id", CATALOGUE)
def test_a_restored_env_steps_as_the_original_through_episode_ends(env_id: str) -> None:
    kwargs = {"max_cycles": 10}
    original = make_parallel_env(env_id=env_id, seed=3, kwargs=kwargs)
    original.reset()
    rng = np.random.default_rng(0)
    _advance(original, rng, steps=7)                               # mid-episode
    arrays, meta = capture_parallel(env=original)
    other = make_parallel_env(env_id=env_id, seed=99, kwargs=kwargs)
    other.reset()
    restore_parallel(env=other, arrays=arrays, meta=json.loads(json.dumps(meta)))
    again_arrays, again_meta = capture_parallel(env=other)       # the same state, dtypes and layout included
    assert json.loads(json.dumps(again_meta)) == json.loads(json.dumps(meta))
    np.testing.assert_array_equal(again_arrays["flat"], arrays["flat"])
    resets = 0
    for _ in range(40):                                            # three episode ends and resets
        if not original.agents:
            (a_obs, _), (b_obs, _) = original.reset(), other.reset()
            resets += 1
            a_rewards = b_rewards = None
        else:
            actions = _actions(original, rng)
            a_obs, a_rewards, a_term, a_trunc, _ = original.step(actions)
            b_obs, b_rewards, b_term, b_trunc, _ = other.step(actions)
            assert (a_term, a_trunc) == (b_term, b_trunc)
        assert a_rewards == b_rewards and a_obs.keys() == b_obs.keys()
        for agent in a_obs:
            np.testing.assert_array_equal(b_obs[agent], a_obs[agent])
        assert other.agents == original.agents
    assert resets >= 3


class _Custom(ParallelEnv):
    metadata = {"name": "custom"}
    possible_agents = agents = ["a"]

    def observation_space(self, agent):
        return spaces.Box(-1, 1, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return {"a": np.zeros(2, np.float32)}, {"a": {}}


def test_an_env_that_is_not_mpe2_is_refused_by_name() -> None:
    with pytest.raises(SnapshotUnsupported, match="_Custom"):
        capture_parallel(env=make_parallel_env(env_id=f"{__name__}:_Custom", seed=0, kwargs={}))
