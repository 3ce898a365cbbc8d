from __future__ import annotations

import gymnasium as gym
import numpy as np
import pydantic
import pytest
import torch

from nimbus.algos.base import Algorithm, KeySpec, LossOutput
from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.algos.registry import ALGO_CONFIGS, AlgoConfig, make_algorithm
from nimbus.envs.spaces import EnvSpaces

OBS = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float64)
DISCRETE = EnvSpaces(observation=OBS, action=gym.spaces.Discrete(4))
CONTINUOUS = EnvSpaces(observation=OBS, action=gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32))
SCALAR = KeySpec(shape=(), dtype="float32")
FLAG = KeySpec(shape=(), dtype="bool")


def test_registry_dispatches_on_name() -> None:
    algo = make_algorithm(config=PPOConfig())
    assert isinstance(algo, PPO) and algo.name == "ppo"
    assert ALGO_CONFIGS["ppo"] is PPOConfig
    algorithm: Algorithm = algo  # structural check for type checkers
    assert algorithm is algo


def test_algo_config_union_discriminates_on_name() -> None:
    adapter = pydantic.TypeAdapter(AlgoConfig)
    assert adapter.validate_python({"name": "ppo", "lr": 1e-3}) == PPOConfig(lr=1e-3)
    with pytest.raises(pydantic.ValidationError, match="ppo"):
        adapter.validate_python({"name": "nope"})
    with pytest.raises(pydantic.ValidationError, match="clip_coeff"):
        adapter.validate_python({"name": "ppo", "clip_coeff": 0.1})


def test_buffer_spec() -> None:
    algo = PPO(config=PPOConfig())
    spec = algo.buffer_spec(spaces=DISCRETE)
    assert spec == {
        "obs": KeySpec(shape=(3,), dtype="float32"), "actions": KeySpec(shape=(), dtype="int64"),
        "log_prob": SCALAR, "values": SCALAR, "next_values": SCALAR, "rewards": SCALAR,
        "terminated": FLAG, "truncated": FLAG, "cut": FLAG,
    }
    assert algo.buffer_spec(spaces=CONTINUOUS)["actions"] == KeySpec(shape=(2,), dtype="float32")


@pytest.mark.parametrize("spaces", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_act_outputs_match_the_buffer_spec(spaces: EnvSpaces) -> None:
    torch.manual_seed(0)
    algo = PPO(config=PPOConfig(hidden_sizes=(8,)))
    model = algo.make_model(spaces=spaces)
    spec = algo.buffer_spec(spaces=spaces)
    for explore in (True, False):
        out = algo.act(model=model, obs=torch.as_tensor(np.zeros((5, 3))), explore=explore)
        assert out.actions.shape == (5, *spec["actions"].shape) and out.actions.dtype == spec["actions"].dtype
        for key in ("log_prob", "values"):
            assert out.extras[key].shape == (5,) and out.extras[key].dtype == spec[key].dtype


def test_postprocess_adds_advantages_and_returns_without_mutating() -> None:
    algo = PPO(config=PPOConfig(gamma=0.5, gae_lambda=1.0))
    batch = {
        "rewards": torch.tensor([1.0, 1.0]), "values": torch.tensor([0.0, 0.0]),
        "next_values": torch.tensor([0.0, 4.0]),
        "terminated": torch.tensor([False, False]), "truncated": torch.tensor([False, False]),
        "cut": torch.tensor([False, True]),
    }
    out = algo.postprocess(batch=batch)
    assert "advantages" not in batch
    # A1 = 1 + 0.5·4 = 3; A0 = 1 + 0.5·3 = 2.5
    torch.testing.assert_close(out["advantages"], torch.tensor([2.5, 3.0]))
    torch.testing.assert_close(out["returns"], torch.tensor([2.5, 3.0]))
    assert out["advantages"].dtype == torch.float32


def test_loss_is_differentiable_with_stats() -> None:
    torch.manual_seed(0)
    algo = PPO(config=PPOConfig(ent_coef=0.01))
    model = algo.make_model(spaces=CONTINUOUS)
    obs = torch.randn(10, 3)
    out = algo.act(model=model, obs=obs, explore=True)
    batch = {"obs": obs, "actions": torch.as_tensor(out.actions), "log_prob": torch.as_tensor(out.extras["log_prob"]),
             "values": torch.as_tensor(out.extras["values"]), "advantages": torch.randn(10), "returns": torch.randn(10)}
    result = algo.loss(model=model, batch=batch)
    assert isinstance(result, LossOutput)
    assert set(result.stats) == {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"}
    assert result.stats["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    result.loss.backward()
    assert model.actor_logstd.grad is not None and torch.isfinite(model.actor_logstd.grad).all()
