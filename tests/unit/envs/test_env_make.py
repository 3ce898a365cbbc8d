"""make_env: catalogued envs pass gymnasium's checker; unknown ids and missing extras fail clearly."""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import DependencyNotInstalled
from gymnasium.utils.env_checker import check_env

from nimbus.envs import make as make_module
from nimbus.envs.checks import ContractChecked
from nimbus.envs.make import make_env
from nimbus.envs.registry import list_envs
from nimbus.errors import ConfigError, EnvContractError

AVAILABLE = [info.env_id for info in list_envs() if info.available and not info.multi_agent]


@pytest.mark.parametrize("env_id", AVAILABLE)
def test_catalogued_env_passes_gymnasium_check_env_through_the_wrapper(
    env_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT (model deprecation warnings) into the cwd
    env = make_env(env_id=env_id, seed=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        check_env(env, skip_render_check=True)
    env.close()


def test_wrapper_stack_checks_the_raw_env_and_keeps_the_time_limit() -> None:
    env = make_env(env_id="CartPole-v1", seed=0)
    assert isinstance(env.env, gym.wrappers.TimeLimit)
    assert isinstance(env.env.env, ContractChecked)
    assert env.env.env.env is env.unwrapped
    env.reset()
    steps = 0
    truncated = terminated = False
    while not (terminated or truncated):
        _, _, terminated, truncated, _ = env.step(1 if steps % 2 else 0)  # balance: alternate pushes
        steps += 1
    assert steps <= 500


def test_first_reset_uses_the_seed_later_resets_continue() -> None:
    first = make_env(env_id="CartPole-v1", seed=123)
    second = make_env(env_id="CartPole-v1", seed=123)
    obs_a, _ = first.reset()
    obs_b, _ = second.reset()
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(obs_a, first.reset(seed=123)[0])
    assert not np.array_equal(first.reset()[0], obs_a)
    assert first.action_space.sample() == second.action_space.sample()


def test_unknown_env_id_lists_close_matches() -> None:
    with pytest.raises(ConfigError, match=r"unknown env id 'CartPol-v1'.*CartPole-v1"):
        make_env(env_id="CartPol-v1", seed=0)


def test_missing_extra_names_the_pip_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_make(env_id: str, **_: object) -> gym.Env:
        raise DependencyNotInstalled("No module named 'mujoco'")

    monkeypatch.setattr(make_module.gym, "make", fake_make)
    with pytest.raises(ConfigError, match=r"pip install nimbus-rl\[mujoco\]") as info:
        make_env(env_id="Hopper-v5", seed=0)
    assert "Hopper-v5" in str(info.value)


def test_kwargs_reach_the_env() -> None:
    env = make_env(env_id="Pendulum-v1", seed=0, kwargs={"g": 3.0, "max_episode_steps": 7})
    assert env.unwrapped.g == 3.0
    env.reset()
    truncated = False
    for _ in range(7):
        _, _, _, truncated, _ = env.step(env.action_space.sample())
    assert truncated


class _OldGymEnv(gym.Env):
    """Old gym API: step returns (obs, reward, done, info)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, dict]:  # type: ignore[override]
        return np.zeros(2, dtype=np.float32), 1.0, False, {}


def test_old_api_env_is_caught_below_the_time_limit() -> None:
    gym.register(id="NimbusTestOldGym-v0", entry_point=_OldGymEnv, max_episode_steps=5)
    try:
        env = make_env(env_id="NimbusTestOldGym-v0", seed=0, actor_rank=2)
        env.reset()
        with pytest.raises(EnvContractError, match=r"'NimbusTestOldGym-v0' \(actor rank 2.*4-tuple.*terminated"):
            env.step(0)
    finally:
        del gym.registry["NimbusTestOldGym-v0"]
