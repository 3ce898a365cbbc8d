from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.algos.ppo.learner import ppo_update, scheduled
from nimbus.envs.spaces import EnvSpaces

SPACES = EnvSpaces(observation=gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32), action=gym.spaces.Discrete(2))


def make_batch(*, algo: PPO, model: torch.nn.Module, num_rows: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(num_rows, 4, generator=generator)
    out = algo.act(model=model, obs=obs, explore=True)
    rows = {
        "obs": obs, "actions": torch.as_tensor(out.actions), "log_prob": torch.as_tensor(out.extras["log_prob"]),
        "values": torch.as_tensor(out.extras["values"]), "next_values": torch.randn(num_rows, generator=generator),
        "rewards": torch.randn(num_rows, generator=generator),
        "terminated": torch.rand(num_rows, generator=generator) < 0.1,
        "truncated": torch.zeros(num_rows, dtype=torch.bool),
    }
    rows["cut"] = rows["terminated"].clone()
    rows["cut"][-1] = True
    return algo.postprocess(batch=rows)


def setup(config: PPOConfig, *, seed: int = 0) -> tuple[PPO, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    algo = PPO(config=config)
    model = algo.make_model(spaces=SPACES)
    return algo, model, algo.make_optimizer(model=model)


def test_schedules() -> None:
    assert scheduled(value=3e-4, schedule="constant", progress=0.7) == 3e-4
    assert scheduled(value=1.0, schedule="linear", progress=0.25) == 0.75
    assert scheduled(value=1.0, schedule="linear", progress=1.5) == 0.0


def test_update_counts_steps_sets_lr_and_returns_finite_stats() -> None:
    config = PPOConfig(num_epochs=3, minibatch_size=40, lr_schedule="linear", clip_schedule="linear")
    algo, model, optimizer = setup(config)
    batch = make_batch(algo=algo, model=model, num_rows=100)
    stats = algo.update(model=model, optimizer=optimizer, batch=batch, progress=0.5,
                        generator=torch.Generator().manual_seed(0))
    assert stats.num_gradient_steps == 3 * 3  # minibatches of 40, 40, 20
    assert stats.num_epochs_done == 3 and stats.num_skipped_steps == 0
    assert stats.lr == pytest.approx(1.5e-4) and optimizer.param_groups[0]["lr"] == pytest.approx(1.5e-4)
    assert stats.clip_coef == pytest.approx(0.1)
    assert all(math.isfinite(value) for value in (stats.policy_loss, stats.value_loss, stats.entropy, stats.approx_kl,
                                                  stats.clip_fraction, stats.explained_variance, stats.grad_norm))


def test_same_generator_same_update() -> None:
    config = PPOConfig(num_epochs=2, minibatch_size=16)
    weights = []
    for _ in range(2):
        algo, model, optimizer = setup(config, seed=3)
        batch = make_batch(algo=algo, model=model, num_rows=64)
        ppo_update(model=model, optimizer=optimizer, batch=batch, config=config, progress=0.0,
                   generator=torch.Generator().manual_seed(11))
        weights.append(torch.nn.utils.parameters_to_vector(model.parameters()))
    torch.testing.assert_close(weights[0], weights[1], rtol=0, atol=0)


def test_target_kl_stops_after_the_first_epoch() -> None:
    config = PPOConfig(num_epochs=10, minibatch_size=16, lr=1e-2, target_kl=1e-9)
    algo, model, optimizer = setup(config)
    batch = make_batch(algo=algo, model=model, num_rows=64)
    stats = ppo_update(model=model, optimizer=optimizer, batch=batch, config=config, progress=0.0,
                       generator=torch.Generator().manual_seed(0))
    assert stats.num_epochs_done == 1 and stats.num_gradient_steps == 4


def test_non_finite_minibatches_are_skipped_and_weights_kept() -> None:
    config = PPOConfig(num_epochs=1, minibatch_size=8)
    algo, model, optimizer = setup(config)
    batch = make_batch(algo=algo, model=model, num_rows=16)
    batch["advantages"] = torch.full((16,), float("nan"))
    before = torch.nn.utils.parameters_to_vector(model.parameters()).clone()
    stats = ppo_update(model=model, optimizer=optimizer, batch=batch, config=config, progress=0.0,
                       generator=torch.Generator().manual_seed(0))
    assert stats.num_skipped_steps == 2 and stats.num_gradient_steps == 0
    assert math.isnan(stats.policy_loss) and math.isnan(stats.grad_norm)  # visible to a caller checking stats
    torch.testing.assert_close(torch.nn.utils.parameters_to_vector(model.parameters()), before, rtol=0, atol=0)


def test_missing_keys_are_named() -> None:
    config = PPOConfig()
    algo, model, optimizer = setup(config)
    batch = make_batch(algo=algo, model=model, num_rows=8)
    del batch["advantages"]
    with pytest.raises(KeyError, match="advantages"):
        ppo_update(model=model, optimizer=optimizer, batch=batch, config=config, progress=0.0,
                   generator=torch.Generator())
