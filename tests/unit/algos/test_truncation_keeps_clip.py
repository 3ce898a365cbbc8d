"""The paper's truncation keeps PPO's clip (issue 26 item 3), on the issue's numbers: value and gradient.

One row, r_self = π/μ = 1.5, A = +1, PPO's ε = 0.2, ρ = 1. PPO clips the ratio at 1.2: its loss −1.2 is a
constant, gradient 0. With R in place of the ratio (``paper_ratio``, nimbus before issue 26) R = 1 < 1.2 so
the clip never acts: loss −1.0, gradient −1.0 (∂/∂log π). The default ``paper`` weighs PPO's clipped row by
R/r_self: loss −1.2 · R/1.5, gradient 0, with or without other learners; where PPO does not clip, the row's
gradient is −R · A, the paper's E[R·A].
"""

from __future__ import annotations

import math

import pytest
import torch

from nimbus.algos.impala.loss import impact_surrogate_loss
from nimbus.algos.ppo.loss import policy_loss
from nimbus.algos.truncation import Truncation

INF = float("inf")
MU = 0.4


def ppo(*, pi: float, advantage: float, peer_ratio: float, form: str | None) -> tuple[float, float]:
    """(loss, ∂loss/∂log π) of PPO's policy loss on one row, μ = 0.4, ε = 0.2, ρ = 1."""
    log_pi = torch.tensor([math.log(pi)], requires_grad=True)
    behaviour = torch.tensor([math.log(MU)])
    peers = torch.tensor([math.log(peer_ratio * MU) if peer_ratio != INF else INF])
    truncation = None if form is None else Truncation(peer_log_prob_min=peers, rho=1.0, form=form)
    loss, _, _ = policy_loss(new_log_prob=log_pi, old_log_prob=behaviour, advantages=torch.tensor([advantage]),
                             clip_coef=0.2, truncation=truncation)
    loss.backward()
    return loss.item(), log_pi.grad.item()


@pytest.mark.parametrize("peer_ratio", [INF, 0.9, 1.3])   # no other learner; one below ρ; one above
def test_issue_numbers_ppo_clip_kept_by_default(peer_ratio):
    r = 1.5
    assert ppo(pi=r * MU, advantage=1.0, peer_ratio=peer_ratio, form=None) == pytest.approx((-1.2, 0.0))
    R = min(r, peer_ratio, 1.0)
    assert ppo(pi=r * MU, advantage=1.0, peer_ratio=peer_ratio, form="paper") == pytest.approx((-1.2 * R / r, 0.0))
    assert ppo(pi=r * MU, advantage=1.0, peer_ratio=peer_ratio, form="paper_ratio") == pytest.approx((-R, -R))


@pytest.mark.parametrize(("r", "advantage", "peer_ratio", "expected"), [
    (1.1, 1.0, 0.9, (-0.9, -0.9)),      # PPO does not clip 1.1: the row is R·A with R = 0.9, gradient −R·A
    (1.1, 1.0, INF, (-1.0, -1.0)),      # no peer: R = ρ = 1
    (0.7, 1.0, INF, (-0.7, -0.7)),      # below ρ, no peer: plain PPO
    (0.7, -1.0, INF, (0.8, 0.0)),       # A < 0 and r < 1 − ε: PPO's lower clip kept, gradient 0
    (1.5, -1.0, 0.6, (0.6, 0.6)),       # A < 0 and r > 1 + ε: PPO's unclipped row, weighted: R = 0.6
])
def test_paper_form_is_the_papers_weight_where_ppo_does_not_clip(r, advantage, peer_ratio, expected):
    assert ppo(pi=r * MU, advantage=advantage, peer_ratio=peer_ratio, form="paper") == pytest.approx(expected)


def test_impact_keeps_its_clip_under_the_paper_form():
    """IMPACT: π/μ = 1.5, IS weight 1, clip 0.4 → the surrogate clips at 1.4 only above it, so take π/μ = 1.6:
    clipped, gradient 0 under ``paper``; ``paper_ratio`` (R = 1 < 1.4) has gradient −1."""
    grads = {}
    for form in ("paper", "paper_ratio"):
        log_pi = torch.tensor([[math.log(0.8)]], requires_grad=True)
        loss, _ = impact_surrogate_loss(log_prob=log_pi, behaviour_log_prob=torch.log(torch.tensor([[0.5]])),
                                        target_log_prob=torch.log(torch.tensor([[0.5]])),
                                        pg_advantages=torch.ones(1, 1), clip_param=0.4, is_ratio_clip=2.0,
                                        truncation=Truncation(peer_log_prob_min=torch.tensor([[INF]]), form=form))
        loss.backward()
        grads[form] = log_pi.grad.item()
    assert grads == pytest.approx({"paper": 0.0, "paper_ratio": -1.0})
