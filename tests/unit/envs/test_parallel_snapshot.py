"""envs/parallel_snapshot.py: an mpe2 env restored from a snapshot (meta through JSON, as the codec carries it)
steps exactly as the env it was taken from, through episode ends and the resets that draw from its generator."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

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


class _HiddenGoal(ParallelEnv):
    """A user's Parallel env whose goal (drawn at reset) no observation shows."""

    metadata = {"name": "hidden_goal"}
    possible_agents = ["a", "b"]

    def __init__(self) -> None:
        self.agents = list(self.possible_agents)
        self.rng = np.random.default_rng(0)

    def observation_space(self, agent):
        return spaces.Box(-10, 10, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        self.rng = np.random.default_rng(seed)
        self.agents, self.pos, self.goal = list(self.possible_agents), np.zeros(2), self.rng.uniform(-5, 5)
        return {a: np.zeros(1, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        for i, agent in enumerate(self.possible_agents):
            self.pos[i] += actions[agent] - 1
        obs = {a: np.array([self.pos[i]], np.float32) for i, a in enumerate(self.possible_agents)}
        rewards = {a: -abs(self.pos[i] - self.goal) for i, a in enumerate(self.possible_agents)}
        flags = {a: False for a in self.possible_agents}
        return obs, rewards, flags, dict(flags), {a: {} for a in self.possible_agents}


class _HiddenGoalWithState(_HiddenGoal):
    def get_state(self):
        return {"pos": self.pos.copy(), "goal": np.array(self.goal)}

    def set_state(self, state):
        self.pos, self.goal = np.array(state["pos"]), float(state["goal"])


def test_a_user_parallel_env_with_hidden_state_is_refused_and_restores_with_the_contract() -> None:
    from nimbus.envs.parallel_snapshot import check_parallel_snapshot

    with pytest.raises(SnapshotUnsupported, match="_HiddenGoal"):
        check_parallel_snapshot(env=make_parallel_env(env_id=f"{__name__}:_HiddenGoal", seed=0, kwargs={}), seed=0)
    rng = np.random.default_rng(0)
    a = make_parallel_env(env_id=f"{__name__}:_HiddenGoalWithState", seed=0, kwargs={})
    a.reset(seed=1)
    _advance(a, rng, 4)
    arrays, meta = capture_parallel(env=a)
    json.dumps(meta)
    b = make_parallel_env(env_id=f"{__name__}:_HiddenGoalWithState", seed=0, kwargs={})
    b.reset(seed=2)
    restore_parallel(env=b, arrays=arrays, meta=meta)
    for _ in range(20):
        actions = _actions(a, rng)
        got_a, got_b = a.step(actions), b.step(actions)
        for part_a, part_b in zip(got_a, got_b):
            assert json.dumps({k: np.asarray(v).tolist() for k, v in part_a.items()}) == \
                json.dumps({k: np.asarray(v).tolist() for k, v in part_b.items()})
