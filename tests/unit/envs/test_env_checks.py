"""ContractChecked turns broken env output into EnvContractError naming env, rank, step and the problem."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from nimbus.envs.checks import ContractChecked
from nimbus.errors import EnvContractError


class FakeEnv(gym.Env):
    """Returns `bad_obs` / `bad_reward` at step `bad_step` (0 = reset), good values otherwise."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, *, bad_step: int = -1, bad_obs: Any = None, bad_reward: Any = None) -> None:
        self.bad_step, self.bad_obs, self.bad_reward = bad_step, bad_obs, bad_reward
        self.t = 0

    def _obs(self) -> Any:
        if self.t == self.bad_step and self.bad_obs is not None:
            return self.bad_obs
        return np.zeros(3, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        reward = self.bad_reward if self.t == self.bad_step and self.bad_reward is not None else 1.0
        return self._obs(), reward, False, False, {}


class OldApiEnv(FakeEnv):
    def step(self, action: int) -> tuple[Any, float, bool, dict]:  # type: ignore[override]
        return np.zeros(3, dtype=np.float32), 1.0, False, {}


class OldResetEnv(FakeEnv):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:  # type: ignore[override]
        return np.zeros(3, dtype=np.float32)


def checked(env: gym.Env) -> ContractChecked:
    return ContractChecked(env, env_id="Fake-v0", seed=5, actor_rank=3)


def run_until_error(env: ContractChecked, steps: int = 3) -> str:
    with pytest.raises(EnvContractError) as info:
        env.reset(seed=0)
        for _ in range(steps):
            env.step(0)
    message = str(info.value)
    assert "'Fake-v0'" in message and "actor rank 3" in message and "seed 5" in message
    return message


def test_good_env_passes() -> None:
    env = checked(FakeEnv())
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3,)
    assert env.step(0)[1] == 1.0


def test_nan_observation_names_the_field_and_step() -> None:
    message = run_until_error(checked(FakeEnv(bad_step=2, bad_obs=np.array([0, np.nan, 0], dtype=np.float32))))
    assert "step 2" in message and "observation contains NaN" in message


def test_inf_observation_at_reset() -> None:
    message = run_until_error(checked(FakeEnv(bad_step=0, bad_obs=np.array([np.inf, 0, 0], dtype=np.float32))))
    assert "reset" in message and "observation contains Inf" in message


@pytest.mark.parametrize("bad, kind", [(float("nan"), "NaN"), (float("-inf"), "Inf")])
def test_non_finite_reward(bad: float, kind: str) -> None:
    message = run_until_error(checked(FakeEnv(bad_step=1, bad_reward=bad)))
    assert "step 1" in message and f"reward is {kind}" in message


def test_wrong_shape_names_expected_and_actual() -> None:
    message = run_until_error(checked(FakeEnv(bad_step=1, bad_obs=np.zeros(4, dtype=np.float32))))
    assert "step 1" in message
    assert "shape (4,) dtype float32" in message and "expected shape (3,) dtype float32" in message


def test_wrong_dtype_names_expected_and_actual() -> None:
    message = run_until_error(checked(FakeEnv(bad_step=0, bad_obs=np.zeros(3, dtype=np.float64))))
    assert "dtype float64" in message and "expected shape (3,) dtype float32" in message


def test_old_step_api_gives_a_migration_hint() -> None:
    message = run_until_error(checked(OldApiEnv()))
    assert "4-tuple" in message and "terminated" in message and "truncated" in message
    assert "migration" in message


def test_old_reset_api_gives_a_migration_hint() -> None:
    message = run_until_error(checked(OldResetEnv()))
    assert "bare array" in message and "(obs, info)" in message


def test_contract_error_is_not_retried() -> None:
    assert EnvContractError.nimbus_retryable is False
