"""Nitro's probe in the learner: which parameters, which rows, which objective, which row (the request it reads:
tests/unit/roles/test_probe_request.py)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.algos.impala.algorithm import Impala
from nimbus.algos.impala.config import ImpalaConfig
from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.envs.spaces import EnvSpaces
from nimbus.nitro.probe import (
    policy_parameters,
    probe_not_run,
    probe_policy,
    round_probe_extras,
    select_subset,
    with_decision,
)
from nimbus.nitro.scaler import NitroScaler
from nimbus.roles.probe import ProbeRequest
from nimbus.types import RoundMetrics, ScalingDecision

SPACES = EnvSpaces(observation=gym.spaces.Box(-1.0, 1.0, (3,), np.float32), action=gym.spaces.Discrete(2))


def _ppo_batch(*, rows: int = 48, seed: int = 0) -> tuple[PPO, torch.nn.Module, dict[str, torch.Tensor]]:
    """A tiny PPO model (hidden 4) and a post-processed batch whose log_prob is a perturbed policy's."""
    torch.manual_seed(seed)
    algo = PPO(config=PPOConfig(hidden_sizes=(4,), minibatch_size=16, ent_coef=0.0))
    model = algo.make_model(spaces=SPACES)
    obs = torch.randn(rows, 3, )
    with torch.no_grad():
        actions, log_prob, values = model.act(obs, explore=True)
    batch = {"obs": obs, "actions": actions, "log_prob": log_prob + 0.1 * torch.randn(rows, ),
             "values": values, "advantages": torch.randn(rows, ),
             "returns": torch.randn(rows, ), "rewards": torch.randn(rows, )}
    return algo, model, batch


def test_policy_parameters_leave_out_critic_and_target_network() -> None:
    ppo_model = PPO(config=PPOConfig()).make_model(spaces=SPACES)
    names = {id(p): n for n, p in ppo_model.named_parameters()}
    assert {names[id(p)].split(".")[0] for p in policy_parameters(model=ppo_model)} == {"actor"}
    impact = Impala(config=ImpalaConfig(variant="impact", hidden_sizes=(8,))).make_model(spaces=SPACES)
    names = {id(p): n for n, p in impact.named_parameters()}
    chosen = [names[id(p)] for p in policy_parameters(model=impact)]
    assert chosen and all(n.startswith("net.actor") for n in chosen)


def test_select_subset_rows_of_flat_and_columns_of_time_major_batches() -> None:
    generator = torch.Generator().manual_seed(0)
    flat = {"rewards": torch.arange(100.0), "obs": torch.arange(200.0).view(100, 2)}
    sub = select_subset(batch=flat, subset_size=30, generator=generator)
    assert sub["rewards"].shape == (30,) and len(set(sub["rewards"].tolist())) == 30
    assert torch.equal(sub["obs"][:, 0], 2 * sub["rewards"])           # the same rows in every key
    time_major = {"rewards": torch.arange(50.0).view(10, 5), "obs": torch.zeros(10, 5, 3)}
    sub = select_subset(batch=time_major, subset_size=25, generator=generator)
    assert sub["rewards"].shape == (10, 3)                               # ceil(25 / 10) whole fragments
    assert select_subset(batch=flat, subset_size=1000, generator=generator)["rewards"].shape == (100,)
    assert select_subset(batch=flat, subset_size=None, generator=generator) is flat   # the default: whole batch


def test_probe_is_the_objective_hessian_over_policy_parameters() -> None:
    """R from the learner's probe equals −λmax/λmin of the explicit Hessian of −loss (the objective)."""
    algo, model, batch = _ppo_batch()
    extras = probe_policy(algo=algo, model=model, batch=batch,
                          request=ProbeRequest(subset_size=48, max_iterations=100, tolerance=1e-8), seed=0)
    hessian = _explicit_hessian(params=policy_parameters(model=model), algo=algo, model=model, batch=batch)
    eigenvalues = torch.linalg.eigvalsh(hessian)
    lam_min, lam_max = float(eigenvalues[0]), float(eigenvalues[-1])
    assert extras["hessian_lambda_max"] == pytest.approx(lam_max, rel=1e-3, abs=1e-6)
    assert extras["hessian_lambda_min"] == pytest.approx(lam_min, rel=1e-3, abs=1e-6)
    assert extras["hessian_ratio"] == pytest.approx(-lam_max / lam_min, rel=1e-3)
    assert extras["probe_s"] > 0 and extras["probe_rows"] == 48.0
    assert all(p.grad is None for p in model.parameters())


def _explicit_hessian(*, params: list[torch.Tensor], algo: PPO, model: torch.nn.Module,
                      batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The explicit Hessian of −loss w.r.t. ``params`` by differentiating each gradient entry."""
    objective = -algo.loss(model=model, batch=batch).loss
    grads = torch.cat([g.reshape(-1) for g in torch.autograd.grad(objective, params, create_graph=True)])
    rows = [torch.cat([h.reshape(-1) for h in torch.autograd.grad(g, params, retain_graph=True)]) for g in grads]
    hessian = torch.stack(rows).detach()
    return (hessian + hessian.T) / 2


def test_probe_on_impala_time_major_batch() -> None:
    torch.manual_seed(0)
    algo = Impala(config=ImpalaConfig(hidden_sizes=(8,), rollout_length=5))
    model = algo.make_model(spaces=SPACES)
    t, b = 5, 6
    obs = torch.randn(t * b, 3)
    with torch.no_grad():
        actions, log_prob, _ = model.net.act(obs, explore=True)
    flat = {"obs": obs, "actions": actions, "rewards": torch.randn(t * b), "next_obs": torch.randn(t * b, 3),
            "terminated": torch.zeros(t * b, dtype=torch.bool), "truncated": torch.zeros(t * b, dtype=torch.bool),
            "behaviour_log_prob": log_prob}
    batch = algo.postprocess(batch=flat)
    extras = probe_policy(algo=algo, model=model, batch=batch,
                          request=ProbeRequest(subset_size=15, max_iterations=30, tolerance=1e-3), seed=1)
    assert extras["probe_rows"] == 15.0                                  # 3 columns × 5 steps
    assert {"hessian_ratio", "hessian_lambda_max", "hessian_lambda_min", "probe_s"} <= set(extras)
    assert math.isfinite(extras["hessian_lambda_max"]) and math.isfinite(extras["hessian_lambda_min"])


def test_with_decision_keeps_this_rounds_ratio_and_adds_signals() -> None:
    row = RoundMetrics(round=3, env_steps=10, episodes=1, return_mean=None, return_min=None, return_max=None,
                       num_actors=2, num_learners=1, policy_version=4, sampling_s=0.1, transfer_s=0.0,
                       learning_s=0.1, round_s=0.5, wall_s=2.0, cost_usd=0.01,
                       extras={"hessian_ratio": 1.5, "probe_s": 0.01})
    decision = ScalingDecision(num_actors=6, reason="nitro score",
                               signals={"hessian_ratio": 1.5, "score": 0.7, "budget_left_usd": 0.2})
    out = with_decision(row=row, decision=decision)
    assert out.extras == {"hessian_ratio": 1.5, "probe_s": 0.01, "score": 0.7, "budget_left_usd": 0.2,
                          "next_num_actors": 6.0}
    assert row.extras == {"hessian_ratio": 1.5, "probe_s": 0.01}         # frozen rows are not mutated


def test_round_probe_extras_adds_the_share_of_round_time() -> None:
    assert round_probe_extras(extras={}, round_s=1.0) == {}
    out = round_probe_extras(extras={"probe_s": 0.02, "hessian_ratio": 2.0}, round_s=0.5)
    assert out["probe_share"] == pytest.approx(0.04) and out["hessian_ratio"] == 2.0


def test_a_probe_that_could_not_run_is_skipped_by_the_scaler() -> None:
    """An off-policy update whose rows were all overwritten returns NaN R: Nitro falls back to I_min."""
    scaler = NitroScaler(min_actors=1, max_actors=4)
    base = dict(env_steps=10, episodes=1, return_mean=None, return_min=None, return_max=None, num_actors=1,
                num_learners=1, policy_version=1, sampling_s=0.1, transfer_s=0.0, learning_s=0.1, round_s=0.5,
                wall_s=1.0, cost_usd=0.0)
    scaler.decide(metrics=RoundMetrics(round=0, extras={"hessian_ratio": 2.0, "hessian_lambda_min": -1.0}, **base))
    boosted = scaler.decide(metrics=RoundMetrics(round=1, extras={"hessian_ratio": 1.0,
                                                                  "hessian_lambda_min": -1.0}, **base))
    skipped = scaler.decide(metrics=RoundMetrics(round=2, extras=probe_not_run(), **base))
    assert boosted.num_actors == 4 and skipped.num_actors == 1 and skipped.signals["skipped_probes"] == 1.0
