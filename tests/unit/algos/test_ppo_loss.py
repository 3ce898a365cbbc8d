"""PPO losses on hand-made tensors: clipping inside/outside the range, both advantage signs, value clipping."""

from __future__ import annotations

import math

import pytest
import torch

from nimbus.algos.ppo.loss import explained_variance, normalize_advantages, policy_loss, ppo_loss, value_loss


def log_ratios(*ratios: float) -> torch.Tensor:
    return torch.log(torch.tensor(ratios)).requires_grad_(True)


def test_policy_loss_clips_only_in_the_direction_of_the_advantage() -> None:
    # row 0: ratio 1.1 inside the range;          −A·r = −1.1
    # row 1: ratio 1.5, A > 0: clipped to 1.2;     max(−1.5, −1.2) = −1.2, no gradient
    # row 2: ratio 0.5, A < 0: clipped to 0.8;     max(0.5, 0.8) = 0.8, no gradient
    new_log_prob = log_ratios(1.1, 1.5, 0.5)
    loss, approx_kl, clip_fraction = policy_loss(
        new_log_prob=new_log_prob, old_log_prob=torch.zeros(3), advantages=torch.tensor([1.0, 1.0, -1.0]), clip_coef=0.2
    )
    assert loss.item() == pytest.approx((-1.1 - 1.2 + 0.8) / 3)
    assert clip_fraction.item() == pytest.approx(2 / 3)
    expected_kl = sum((r - 1) - math.log(r) for r in (1.1, 1.5, 0.5)) / 3
    assert approx_kl.item() == pytest.approx(expected_kl, rel=1e-5)
    loss.backward()
    torch.testing.assert_close(new_log_prob.grad, torch.tensor([-1.1 / 3, 0.0, 0.0]))


def test_policy_loss_keeps_the_pessimistic_unclipped_term() -> None:
    # ratio 1.5 with A < 0: max(1.5, 1.2) = 1.5; ratio 0.5 with A > 0: max(−0.5, −0.8) = −0.5; both keep gradients
    new_log_prob = log_ratios(1.5, 0.5)
    loss, _, clip_fraction = policy_loss(
        new_log_prob=new_log_prob, old_log_prob=torch.zeros(2), advantages=torch.tensor([-1.0, 1.0]), clip_coef=0.2
    )
    assert loss.item() == pytest.approx((1.5 - 0.5) / 2)
    assert clip_fraction.item() == 1.0  # counted as outside the range even though not clipped
    loss.backward()
    torch.testing.assert_close(new_log_prob.grad, torch.tensor([1.5 / 2, -0.5 / 2]))


def test_policy_loss_at_ratio_one_is_minus_mean_advantage() -> None:
    loss, approx_kl, clip_fraction = policy_loss(
        new_log_prob=torch.full((4,), -0.7), old_log_prob=torch.full((4,), -0.7),
        advantages=torch.tensor([1.0, 2.0, -3.0, 4.0]), clip_coef=0.1,
    )
    assert loss.item() == pytest.approx(-1.0)
    assert approx_kl.item() == 0.0 and clip_fraction.item() == 0.0


def test_value_loss_unclipped_and_clipped() -> None:
    new, old, returns = torch.tensor([1.0, 3.0]), torch.tensor([0.0, 2.5]), torch.tensor([2.0, 0.0])
    unclipped = value_loss(new_values=new, old_values=old, returns=returns, vf_clip=None)
    assert unclipped.item() == pytest.approx(0.5 * (1 + 9) / 2)
    # clipped: V = 0 + clip(1, ±0.2) = 0.2 → (0.2 − 2)² = 3.24 > 1; V = 2.5 + 0.2 = 2.7 → 7.29 < 9
    clipped = value_loss(new_values=new, old_values=old, returns=returns, vf_clip=0.2)
    assert clipped.item() == pytest.approx(0.5 * (3.24 + 9) / 2)


def test_ppo_loss_combines_the_parts() -> None:
    common = dict(new_log_prob=torch.zeros(2), old_log_prob=torch.zeros(2), advantages=torch.tensor([1.0, 3.0]),
                  new_values=torch.tensor([1.0, 1.0]), old_values=torch.tensor([1.0, 1.0]),
                  returns=torch.tensor([3.0, 1.0]), clip_coef=0.2, vf_clip=None)
    out = ppo_loss(**common, entropy=torch.tensor([0.5, 1.5]), ent_coef=0.1, vf_coef=0.5)
    # policy −2, value ½·(4 + 0)/2 = 1, entropy 1 → −2 − 0.1 + 0.5
    assert out.loss.item() == pytest.approx(-1.6)
    assert out.stats == pytest.approx({"policy_loss": -2.0, "value_loss": 1.0, "entropy": 1.0, "approx_kl": 0.0,
                                       "clip_fraction": 0.0})


def test_normalize_advantages_and_explained_variance() -> None:
    normalized = normalize_advantages(torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(normalized, torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6, rtol=0)
    assert normalize_advantages(torch.tensor([5.0])).item() == 0.0
    returns = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(values=returns, returns=returns) == 1.0
    assert explained_variance(values=torch.zeros(4), returns=returns) == pytest.approx(0.0)
    assert explained_variance(values=returns, returns=torch.ones(4)) == 0.0  # undefined: 0, never NaN
