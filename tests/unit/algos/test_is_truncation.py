"""Stellaris's cross-learner IS truncation (Eq. 2) against the authors' form, on hand-made probabilities."""

from __future__ import annotations

import math

import pytest
import torch

from nimbus.algos.impala.loss import impact_surrogate_loss
from nimbus.algos.ppo.loss import policy_loss
from nimbus.algos.truncation import Truncation, truncate, truncated_fraction, truncated_ratio

INF = float("inf")


@pytest.mark.parametrize(
    ("r_self", "peer_min", "paper", "code"),
    [
        (0.8, 0.5, 0.5, 0.8),     # a peer far below: the paper follows it; the code keeps r_self (peer < ρ → ρ)
        (1.5, 1.2, 1.0, 1.2),     # everyone above ρ: the paper caps at ρ; the code at the peers' min
        (1.5, 0.7, 0.7, 1.0),     # self above, a peer below: paper → 0.7, code → min(1.5, max(0.7, 1)) = 1
        (0.6, 0.9, 0.6, 0.6),     # self is the smallest and below ρ: both keep r_self
        (1.3, INF, 1.0, 1.3),     # no other learner: the paper still caps at ρ, the code does not
    ],
)
def test_paper_and_code_forms(r_self, peer_min, paper, code):
    ratio, peers = torch.tensor([r_self]), torch.tensor([peer_min])
    assert truncated_ratio(ratio=ratio, peer_ratio_min=peers, rho=1.0, form="paper").item() == pytest.approx(paper)
    assert truncated_ratio(ratio=ratio, peer_ratio_min=peers, rho=1.0, form="code").item() == pytest.approx(code)


def test_truncated_ratio_carries_the_self_gradient_scaled():
    log_pi = torch.tensor([math.log(0.6)], requires_grad=True)
    ratio = (log_pi - math.log(0.4)).exp()                      # 1.5
    truncated = truncated_ratio(ratio=ratio, peer_ratio_min=torch.tensor([0.75]), rho=1.0, form="paper")
    truncated.sum().backward()
    # R = 0.75 carries ∂R/∂log π = R (the score-function gradient of R·A with A = 1)
    assert truncated.item() == pytest.approx(0.75)
    assert log_pi.grad.item() == pytest.approx(0.75)


def test_policy_loss_uses_the_truncated_ratio():
    new = torch.log(torch.tensor([0.6, 0.3]))
    old = torch.log(torch.tensor([0.4, 0.3]))                   # ratios 1.5 and 1.0
    adv = torch.tensor([1.0, 1.0])
    peers = torch.log(torch.tensor([0.2, 0.3]))                 # peer ratios 0.5 and 1.0
    plain, _, _ = policy_loss(new_log_prob=new, old_log_prob=old, advantages=adv, clip_coef=10.0)
    cut, _, _ = policy_loss(new_log_prob=new, old_log_prob=old, advantages=adv, clip_coef=10.0,
                            truncation=Truncation(peer_log_prob_min=peers))
    assert plain.item() == pytest.approx(-(1.5 + 1.0) / 2)
    assert cut.item() == pytest.approx(-(0.5 + 1.0) / 2)


@pytest.mark.parametrize(("form", "expected_loss", "clip_ratio"),
                         [(None, -1.4, 1.6), ("paper", -1.4 * 0.6 / 1.6, 1.6), ("paper_ratio", -0.6, 0.6),
                          ("code", -1.0, 1.0)])
def test_impact_surrogate_truncates_pi_over_mu(form, expected_loss, clip_ratio):
    """μ = 0.5, π = 0.8 (π/μ = 1.6), π_target = μ (IS weight 1), a peer at 0.3 (0.6), A = 1, clip 0.4: untruncated
    the surrogate clips 1.6 to 1.4; Eq. 2 gives R = min(|min(1.6, 0.6)|, 1) = 0.6: ``paper`` weighs the clipped
    row by R/(π/μ) = 0.375, ``paper_ratio`` puts 0.6 in the clip; the authors' form min(1.6, max(0.6, 1)) = 1.0."""
    log = lambda p: torch.log(torch.tensor([[p]]))   # noqa: E731  ([T, B] = [1, 1])
    truncation = None if form is None else Truncation(peer_log_prob_min=log(0.3), rho=1.0, form=form)
    loss, ratio = impact_surrogate_loss(log_prob=log(0.8), behaviour_log_prob=log(0.5), target_log_prob=log(0.5),
                                        pg_advantages=torch.ones(1, 1), clip_param=0.4, is_ratio_clip=2.0,
                                        truncation=truncation)
    assert loss.item() == pytest.approx(expected_loss)
    assert ratio.item() == pytest.approx(clip_ratio)


def test_default_truncation_is_the_papers_with_rho_one():
    """DESIGN.md §3: R = min(|min_i π_i/μ|, ρ) with ρ = 1.0. With no other learner (+inf) a ratio above 1 is
    capped at 1 and one below is kept; a peer below both decides."""
    behaviour = torch.log(torch.tensor([0.4, 0.5, 0.4]))
    ratio = torch.tensor([1.5, 0.8, 1.5])
    peers = torch.log(torch.tensor([INF, INF, 0.3]))           # peer ratios +inf, +inf, 0.75
    truncated = truncate(ratio=ratio, behaviour_log_prob=behaviour, truncation=Truncation(peer_log_prob_min=peers))
    assert truncated.tolist() == pytest.approx([1.0, 0.8, 0.75])


@pytest.mark.parametrize(("form", "expected"), [("paper", 0.75), ("code", 0.25)])
def test_truncated_fraction_is_the_share_of_rows_whose_ratio_changed(form, expected):
    """Four rows, μ = 0.5, ratios 1.2, 0.8, 1.0, 1.6 against peer ratios +inf, 0.6, 1.4, 1.4.
    paper min(|min(r, peer)|, 1): 1.0, 0.6, 1.0, 1.0 (rows 0, 1, 3 changed); code min(r, max(peer, 1)):
    1.2, 0.8, 1.0, 1.4 (row 3 changed). Row 2 sits exactly at ρ and is untouched in both."""
    behaviour = torch.log(torch.full((4,), 0.5))
    log_prob = torch.log(torch.tensor([0.6, 0.4, 0.5, 0.8]))
    peers = torch.log(torch.tensor([INF, 0.3, 0.7, 0.7]))
    truncation = Truncation(peer_log_prob_min=peers, rho=1.0, form=form)
    fraction = truncated_fraction(log_prob=log_prob, behaviour_log_prob=behaviour, truncation=truncation)
    assert fraction == pytest.approx(expected)
    untouched = Truncation(peer_log_prob_min=torch.full((4,), INF), rho=2.0, form=form)
    assert truncated_fraction(log_prob=log_prob, behaviour_log_prob=behaviour, truncation=untouched) == 0.0
