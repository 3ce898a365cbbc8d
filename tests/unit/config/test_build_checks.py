"""What the config alone cannot tell is checked when the run is built, before any worker: exit 2 naming the key.

An unknown ``env.kwargs`` key was a TypeError traceback (rc 1) from gymnasium (issue 28.7); ``learner.device:
cuda`` and ``devices.kind: cuda`` on a machine without CUDA were an AssertionError / ValueError traceback.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
import torch

from nimbus.config import load_config
from nimbus.envs.make import make_env
from nimbus.errors import ConfigError
from nimbus.policy.build import probe_spaces
from nimbus.roles.specs import check_devices

REPO = Path(__file__).resolve().parents[3]
PPO = REPO / "configs" / "ppo-cartpole.yaml"


class _BrokenInit(gym.Env):
    """An env whose constructor has its own TypeError bug (not about a keyword it was given)."""

    def __init__(self, size: int = 3) -> None:
        len(size)   # TypeError: object of type 'int' has no len()


def test_an_unknown_env_kwarg_is_a_config_error_naming_it() -> None:
    config = load_config(path=PPO, overrides=["env.kwargs={foo: 1}"])
    with pytest.raises(ConfigError, match=r"env\.kwargs\.foo: CartPole-v1 takes no argument 'foo'") as caught:
        probe_spaces(config=config)
    assert isinstance(caught.value, TypeError)   # code probing an optional keyword (render_mode) still falls back


def test_a_multi_agent_env_names_the_unknown_kwarg_too() -> None:
    pytest.importorskip("mpe2")
    from nimbus.envs.parallel import build_raw_env

    with pytest.raises(ConfigError, match=r"env\.kwargs\.foo: mpe2:simple_spread_v3 takes no argument 'foo'"):
        build_raw_env(env_id="mpe2:simple_spread_v3", kwargs={"N": 3, "foo": 1})


def test_an_envs_own_type_error_stays_its_own() -> None:
    gym.register(id="nimbus-test/BrokenInit-v0", entry_point=_BrokenInit)
    try:
        with pytest.raises(TypeError, match="has no len"):
            make_env(env_id="nimbus-test/BrokenInit-v0", seed=0, kwargs={"size": 4})
    finally:
        gym.registry.pop("nimbus-test/BrokenInit-v0")


@pytest.mark.parametrize("overrides,key", [
    (["learner.device=cuda"], r"learner\.device: cuda, but torch sees no CUDA device"),
    (["devices={pool: on_demand, kind: cuda}"], r"devices\.kind: cuda, but torch sees no CUDA device"),
])
def test_cuda_asked_for_where_there_is_none_exits_2(monkeypatch: pytest.MonkeyPatch, overrides: list[str],
                                                   key: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)   # the same answer on a GPU machine
    with pytest.raises(ConfigError, match=key):
        check_devices(config=load_config(path=PPO, overrides=overrides))
    check_devices(config=load_config(path=PPO, overrides=[*overrides, "devices.kind=auto", "learner.device=auto"]))


def test_a_ray_clusters_learners_may_have_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = load_config(path=PPO, overrides=["learner.device=cuda", "runtime={backend: ray, address: auto, "
                                              "allow_insecure: true}", "store={backend: redis, allow_insecure: true}"])
    check_devices(config=config)
