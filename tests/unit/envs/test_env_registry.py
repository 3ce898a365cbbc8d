from __future__ import annotations

from nimbus.envs.registry import extra_available, list_envs, required_extra


def test_catalogue_lists_core_and_mujoco_envs() -> None:
    infos = {info.env_id: info for info in list_envs()}
    assert set(infos) >= {"CartPole-v1", "Acrobot-v1", "Pendulum-v1", "Hopper-v5", "HalfCheetah-v5"}
    assert infos["CartPole-v1"].action_kind == "discrete" and infos["CartPole-v1"].extra is None
    assert infos["Pendulum-v1"].action_kind == "continuous" and infos["Pendulum-v1"].available
    assert infos["Hopper-v5"].extra == "mujoco" and infos["Hopper-v5"].family == "mujoco"
    assert infos["Hopper-v5"].available == extra_available("mujoco")
    spread = infos["mpe2:simple_spread_v3"]
    assert spread.multi_agent and spread.extra == "mpe" and not infos["CartPole-v1"].multi_agent


def test_required_extra_guesses_from_the_entry_point() -> None:
    assert required_extra(env_id="Walker2d-v5") == "mujoco"
    assert required_extra(env_id="MountainCar-v0") is None
    assert required_extra(env_id="NoSuchEnv-v0") is None
