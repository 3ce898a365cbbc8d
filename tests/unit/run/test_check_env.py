"""``nimbus check-env`` (run/check_env.py) on real envs: CartPole, envs written here that break what training needs,
and an mpe2 env; each refusal is the one ``nimbus train`` gives, with its fix."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from nimbus.cli import main
from nimbus.run.check_env import FAIL, OK, REFUSED, check_env


class UnseededEnv(gym.Env):
    """Box observations, two actions; its start state comes from numpy's global generator (not self.np_random),
    so reset(seed=...) does not repeat it; no get_state(), so no snapshot."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.state = np.random.uniform(-0.5, 0.5, 3).astype(np.float32)
        self.t = 0
        return self.state.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self.state = np.clip(self.state + (0.1 if action else -0.1), -1, 1).astype(np.float32)
        return self.state.copy(), 1.0, False, self.t >= 20, {}


class DictObservationEnv(UnseededEnv):
    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (3,), np.float32)})

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, info = super().reset(seed=seed)
        return {"pos": obs}, info

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        return {"pos": obs}, reward, terminated, truncated, info


gym.register("CheckEnvTest/Unseeded-v0", entry_point=f"{__name__}:UnseededEnv", max_episode_steps=20)
gym.register("CheckEnvTest/DictObservation-v0", entry_point=f"{__name__}:DictObservationEnv", max_episode_steps=20)


def by_check(findings: list) -> dict[str, Any]:
    return {f.check: f for f in findings}


def test_cartpole_trains_with_three_algorithms_and_sac_s_refusal_names_them() -> None:
    found = by_check(check_env(env_id="CartPole-v1", kwargs={}, imports=(), seed=0))
    assert [found[f"algo.name: {n}"].status for n in ("ppo", "dqn", "impala", "sac")] == [OK, OK, OK, REFUSED]
    assert "SAC needs a bounded 1-D Box action space" in found["algo.name: sac"].detail
    assert "use algo.name: ppo or dqn or impala" in found["algo.name: sac"].detail
    assert found["env slot snapshot"].status == OK and found["seeding"].status == OK
    assert found["gymnasium check_env"].status != FAIL and found["make (as nimbus train)"].status == OK


def test_an_env_seeding_from_the_global_generator_fails_seeding_and_its_snapshot_is_refused() -> None:
    found = by_check(check_env(env_id="CheckEnvTest/Unseeded-v0", kwargs={}, imports=(), seed=0))
    assert found["seeding"].status == FAIL and "self.np_random" in found["seeding"].detail
    assert found["gymnasium check_env"].status == FAIL          # gymnasium's own determinism check agrees
    snapshot = found["env slot snapshot"]
    assert snapshot.status == REFUSED and "cannot be snapshotted exactly" in snapshot.detail
    assert "get_state() and set_state(state)" in snapshot.detail   # train's refusal, with its fix
    assert found["algo.name: dqn"].status == OK


def test_a_dict_observation_is_refused_as_train_refuses_it_naming_the_wrapper(capsys) -> None:
    found = by_check(check_env(env_id="CheckEnvTest/DictObservation-v0", kwargs={}, imports=(), seed=0))
    made = found["make (as nimbus train)"]
    assert made.status == FAIL and "gymnasium.wrappers.FlattenObservation" in made.detail
    assert main(["check-env", "CheckEnvTest/DictObservation-v0"]) == 1
    assert "not trainable as is" in " ".join(capsys.readouterr().out.split())


def test_an_unknown_kwarg_is_named() -> None:
    found = by_check(check_env(env_id="CartPole-v1", kwargs={"no_such": 1}, imports=(), seed=0))
    assert found["make (as nimbus train)"].status == FAIL and "no_such" in found["make (as nimbus train)"].detail


def test_an_mpe2_env_with_agents_of_two_widths() -> None:
    pytest.importorskip("mpe2")
    found = by_check(check_env(env_id="mpe2:simple_adversary_v3", kwargs={"N": 2, "max_cycles": 25}, imports=(),
                               seed=0))
    assert found["pettingzoo parallel_api_test"].status == OK and found["seeding"].status == OK
    assert all(found[f"algo.name: {n}"].status == OK for n in ("ippo", "mappo", "iql", "vdn", "qmix"))
    sharing = found["marless.sharing: full"]
    assert sharing.status == REFUSED and "2 kinds" in sharing.detail and "sharing: static" in sharing.detail
    assert "adversary_0: observation Box(-inf, inf, (8,)" in found["spaces"].detail
    assert found["env slot snapshot"].status == OK


def test_the_command_exits_0_for_cartpole_and_2_for_bad_kwargs(capsys) -> None:
    assert main(["check-env", "CartPole-v1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "refused algo.name: sac" in out and "trainable with algo.name ppo, dqn, impala" in out
    assert main(["check-env", "CartPole-v1", "--kwargs", "[1, 2]"]) == 2


def test_a_multi_agent_env_with_masks_and_no_global_state() -> None:
    found = by_check(check_env(env_id="tests.unit.marless.masked_env:make_env", kwargs={}, imports=(), seed=0))
    assert found["action masks"].status == OK and "found for a, b" in found["action masks"].detail
    qmix = found["algo.name: qmix"]
    assert qmix.status == REFUSED and "has no state()" in qmix.detail and "use vdn" in qmix.detail
    assert found["algo.name: vdn"].status == OK and found["pettingzoo parallel_api_test"].status == OK
