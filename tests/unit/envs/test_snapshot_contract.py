"""Snapshots never restore silently wrong (issue 25.8): an env with hidden state that is not a known exact path is
refused (at capture and at build time, exit 2 before any worker starts), and the same env with the user contract
(get_state / set_state) restores exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from nimbus.config import load_config
from nimbus.envs.make import make_env
from nimbus.envs.snapshot import SnapshotUnsupported, capture, check_snapshot, restore
from nimbus.errors import ConfigError
from nimbus.policy.build import check_snapshots
from nimbus.run.build import build
from tests.unit.envs.env_helpers import assert_continue_alike

REPO = Path(__file__).resolve().parents[3]


class HiddenGoalEnv(gym.Env):
    """A float ``state`` like classic control, plus a goal drawn at reset that the observation never shows."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.goal = float(self.np_random.uniform(-5.0, 5.0))
        self.state = np.zeros(1, np.float64)
        return self.state.astype(np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.state = np.clip(self.state + np.asarray(action, np.float64), -10.0, 10.0)
        reward = -abs(float(self.state[0]) - self.goal)
        return self.state.astype(np.float32), reward, reward > -0.05, False, {}


class HiddenGoalWithState(HiddenGoalEnv):
    """The same env under the user contract."""

    def get_state(self) -> dict[str, np.ndarray]:
        return {"state": self.state.copy(), "goal": np.array(self.goal)}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self.state, self.goal = np.array(state["state"], np.float64), float(state["goal"])


@pytest.fixture(autouse=True)
def _registered():
    gym.register(id="HiddenGoal-v0", entry_point=HiddenGoalEnv, max_episode_steps=50)
    gym.register(id="HiddenGoalState-v0", entry_point=HiddenGoalWithState, max_episode_steps=50)
    yield
    gym.registry.pop("HiddenGoal-v0", None)
    gym.registry.pop("HiddenGoalState-v0", None)


def _stepped(env_id: str, *, seed: int) -> gym.Env:
    env = make_env(env_id=env_id, seed=seed)
    env.reset()
    for _ in range(3):
        env.step(np.array([0.3], np.float32))
    return env


def test_an_env_with_hidden_state_is_refused_not_restored_wrong() -> None:
    env = _stepped("HiddenGoal-v0", seed=1)
    with pytest.raises(SnapshotUnsupported, match="HiddenGoalEnv.*get_state"):
        capture(env=env)
    with pytest.raises(SnapshotUnsupported):
        check_snapshot(env=make_env(env_id="HiddenGoal-v0", seed=1))


def test_the_same_env_with_get_state_and_set_state_restores_exactly() -> None:
    a = _stepped("HiddenGoalState-v0", seed=1)
    arrays, meta = capture(env=a)
    b = _stepped("HiddenGoalState-v0", seed=2)      # another goal: everything must come from the snapshot
    assert b.unwrapped.goal != a.unwrapped.goal
    restore(env=b, arrays=arrays, meta=meta)
    assert b.unwrapped.goal == a.unwrapped.goal
    assert_continue_alike(a=a, b=b, steps=120)


def test_a_subclass_of_a_classic_control_env_is_not_taken_for_it() -> None:
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    class WindyCartPole(CartPoleEnv):   # may hold more than CartPole's state
        pass

    gym.register(id="WindyCartPole-v0", entry_point=WindyCartPole, max_episode_steps=50)
    try:
        with pytest.raises(SnapshotUnsupported, match="WindyCartPole"):
            check_snapshot(env=make_env(env_id="WindyCartPole-v0", seed=0))
    finally:
        gym.registry.pop("WindyCartPole-v0", None)


def test_a_wrapper_that_may_hold_state_is_refused() -> None:
    env = make_env(env_id="CartPole-v1", seed=0, wrappers=("gymnasium.wrappers.NormalizeObservation",))
    with pytest.raises(SnapshotUnsupported, match="NormalizeObservation"):
        check_snapshot(env=env)


@pytest.mark.parametrize("key", ["actors.restore_slots", "train.exact_resume"])
def test_restore_slots_on_such_an_env_is_refused_at_build_time(key: str, tmp_path: Path) -> None:
    config = load_config(path=REPO / "configs" / "ppo-cartpole.yaml",
                         overrides=["env.id=HiddenGoal-v0", "algo.name=ppo", f"{key}=true"])
    with pytest.raises(ConfigError, match=f"{key}: env 'HiddenGoal-v0' cannot be snapshotted.*HiddenGoalEnv"):
        build(config=config, run_dir=tmp_path)
    assert not (tmp_path / "ledger.jsonl").exists()   # refused before the ledger, pool or Store exist
    user = load_config(path=REPO / "configs" / "ppo-cartpole.yaml",
                       overrides=["env.id=HiddenGoalState-v0", f"{key}=true"])
    check_snapshots(config=user)   # the contract's env passes the same check
