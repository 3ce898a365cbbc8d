"""PettingZoo Parallel envs: the catalogue passes parallel_api_test (raw and checked), and broken envs raise
EnvContractError naming env, agent and step."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.test import parallel_api_test
from pettingzoo.utils.env import ParallelEnv

from nimbus.envs.parallel import (
    CATALOGUE,
    ContractCheckedParallel,
    agent_spaces,
    build_raw_env,
    global_state,
    make_parallel_env,
)
from nimbus.errors import ConfigError, EnvContractError

AGENTS = ["a", "b"]
BAD_ID = "test_parallel:bad_env"  # tests/unit/envs is on sys.path (pytest's prepend import mode)


class BadParallel(ParallelEnv):
    """Two agents, 4-dim Box obs, Discrete(2) actions, episodes of 5 steps. At step ``bad_step`` it breaks in the
    way ``fault`` names: drop agent b from ``drop_from``, change b's observation space, NaN in b's obs, wrong shape."""

    metadata = {"name": "bad_v0"}

    def __init__(self, *, fault: str = "none", bad_step: int = 2, drop_from: int = 0) -> None:
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self.fault, self.bad_step, self.drop_from = fault, bad_step, drop_from
        self.t = 0
        self._obs_space = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self._changed_space = gym.spaces.Box(-1.0, 1.0, shape=(5,), dtype=np.float32)
        self._action_space = gym.spaces.Discrete(2)

    def observation_space(self, agent: str) -> gym.Space:
        if self.fault == "space" and agent == "b" and self.t >= self.bad_step:
            return self._changed_space
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    def _obs(self, agent: str) -> np.ndarray:
        obs = np.full(4, 0.1 * self.t, dtype=np.float32)
        if agent == "b" and self.t == self.bad_step:
            if self.fault == "nan":
                obs[2] = np.nan
            if self.fault == "shape":
                obs = np.zeros(3, dtype=np.float32)
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t = 0
        self.agents = list(AGENTS)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        done = self.t >= 5
        out = ({a: self._obs(a) for a in self.agents}, {a: 1.0 for a in self.agents},
               {a: False for a in self.agents}, {a: done for a in self.agents}, {a: {} for a in self.agents})
        if self.fault == "missing" and self.t == self.bad_step:
            del out[self.drop_from]["b"]
        if done:
            self.agents = []
        return out

    def state(self) -> np.ndarray:
        raise NotImplementedError


def bad_env(**kwargs: Any) -> BadParallel:
    return BadParallel(**kwargs)


def not_an_env() -> list[str]:
    return list(AGENTS)


def run_episode(env: ParallelEnv) -> None:
    env.reset()
    while env.agents:
        env.step({a: env.action_space(a).sample() for a in env.agents})


@pytest.mark.parametrize("env_id", CATALOGUE)
def test_catalogue_passes_parallel_api_test_raw_and_checked(env_id: str) -> None:
    parallel_api_test(build_raw_env(env_id=env_id, kwargs={"max_cycles": 25}), num_cycles=60)
    checked = make_parallel_env(env_id=env_id, seed=0, kwargs={"max_cycles": 25})
    parallel_api_test(checked, num_cycles=60)
    assert isinstance(checked, ContractCheckedParallel)


def test_spread_spaces_and_state() -> None:
    env = make_parallel_env(env_id="mpe2:simple_spread_v3", seed=3, kwargs={"N": 3, "max_cycles": 25})
    env.reset()
    spaces = agent_spaces(env=env)
    assert list(spaces) == ["agent_0", "agent_1", "agent_2"]
    assert spaces["agent_0"].observation.shape == (18,) and spaces["agent_0"].action.n == 5
    state = global_state(env=env)
    assert state.shape == (54,) and state.dtype == np.float32


def test_first_reset_uses_the_seed() -> None:
    first = make_parallel_env(env_id="mpe2:simple_spread_v3", seed=7, kwargs={})
    second = make_parallel_env(env_id="mpe2:simple_spread_v3", seed=7, kwargs={})
    other = make_parallel_env(env_id="mpe2:simple_spread_v3", seed=8, kwargs={})
    a, b, c = first.reset()[0], second.reset()[0], other.reset()[0]
    np.testing.assert_array_equal(a["agent_0"], b["agent_0"])
    assert not np.array_equal(a["agent_0"], c["agent_0"])


def test_user_factory_and_state_fallback() -> None:
    env = make_parallel_env(env_id=BAD_ID, seed=0, kwargs={})
    run_episode(env)
    state = global_state(env=env)  # no state(): the agents' last observations concatenated
    np.testing.assert_allclose(state, np.full(8, 0.5, dtype=np.float32))


def test_unknown_ids_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="not a multi-agent env id"):
        make_parallel_env(env_id="CartPole-v1", seed=0, kwargs={})
    with pytest.raises(ConfigError, match="mpe2:no_such_env"):
        make_parallel_env(env_id="mpe2:no_such_env", seed=0, kwargs={})
    with pytest.raises(ConfigError, match="not a PettingZoo ParallelEnv"):
        make_parallel_env(env_id="test_parallel:not_an_env", seed=0, kwargs={})


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"fault": "missing", "drop_from": 0}, r"step 2 .*agent 'b' is live but missing from observations"),
    ({"fault": "missing", "drop_from": 1}, r"step 2 .*agent 'b' is live but missing from rewards"),
    ({"fault": "missing", "drop_from": 3}, r"step 2 .*agent 'b' is live but missing from truncations"),
    ({"fault": "space", "bad_step": 3}, r"step 3 .*agent 'b'.s observation space changed"),
    ({"fault": "nan", "bad_step": 4}, r"step 4 .*agent 'b'.*NaN"),
    ({"fault": "shape", "bad_step": 1}, r"step 1 .*agent 'b'.*shape \(3,\)"),
    ({"fault": "nan", "bad_step": 0}, r"reset .*agent 'b'.*NaN"),
])
def test_contract_errors_name_env_agent_and_step(kwargs: dict[str, Any], pattern: str) -> None:
    env = make_parallel_env(env_id=BAD_ID, seed=11, kwargs=kwargs)
    with pytest.raises(EnvContractError, match=pattern) as info:
        run_episode(env)
    assert f"env {BAD_ID!r} (seed 11)" in str(info.value)


def test_good_bad_env_passes() -> None:
    env = make_parallel_env(env_id=BAD_ID, seed=0, kwargs={})
    for _ in range(2):
        run_episode(env)
    parallel_api_test(functools.partial(bad_env)(), num_cycles=10)


def test_a_space_the_env_returns_unchanged_is_not_compared_by_value_each_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """simple_spread returns the same space objects at every call: the checker compares them by identity, not with
    Box's ``__eq__`` (np.isclose on the bounds, 10 % of an IPPO run's time); a space that is a new object is still
    compared by value (test_contract_errors_name_env_agent_and_step: a changed space raises)."""
    env = make_parallel_env(env_id="mpe2:simple_spread_v3", seed=0, kwargs={"N": 3, "max_cycles": 25})
    compared = []
    box_eq = gym.spaces.Box.__eq__
    monkeypatch.setattr(gym.spaces.Box, "__eq__", lambda self, other: compared.append(1) or box_eq(self, other))
    run_episode(env)
    assert compared == []
