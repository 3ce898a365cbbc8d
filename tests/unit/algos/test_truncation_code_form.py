"""The ``code`` truncation is the authors' ``ppo_loss`` in value and gradient (issue 26 item 4).

IntelliSys-Lab/Stellaris-SC24, rllib/policy/torch_policy_v2.py at dff0e0d: the floor
m = max(min over the detached ratios of the learner and its peers, ρ), then R = elementwise-min(r_self, m) in
PPO's clipped surrogate. Expected values below are worked by hand from that description: a row where
m < r_self is the constant m (gradient 0); a row where m = r_self is a tie of the elementwise minimum, whose
gradient PyTorch splits in half; elsewhere R = r_self with its full gradient. μ = 0.4, ε = 0.2, ρ = 1.
"""

from __future__ import annotations

import math

import pytest
import torch

from nimbus.algos.ppo.loss import policy_loss
from nimbus.algos.truncation import Truncation

INF = float("inf")
MU = 0.4


def code_loss(*, r: float, advantage: float, peer_ratios: list[float]) -> tuple[float, float]:
    """(loss, ∂loss/∂log π) of PPO's policy loss with the ``code`` truncation on one row."""
    log_pi = torch.tensor([math.log(r * MU)], requires_grad=True)
    peer_min = min([math.log(p * MU) for p in peer_ratios], default=INF)
    loss, _, _ = policy_loss(new_log_prob=log_pi, old_log_prob=torch.tensor([math.log(MU)]),
                             advantages=torch.tensor([advantage]), clip_coef=0.2,
                             truncation=Truncation(peer_log_prob_min=torch.tensor([peer_min]), rho=1.0, form="code"))
    loss.backward()
    return loss.item(), log_pi.grad.item()


def test_issue_numbers_a_truncated_row_is_a_constant():
    """r 1.1, A +1, another learner at 0.9: m = max(0.9, 1) = 1 < 1.1, R = 1 constant: loss −1, gradient 0
    (nimbus before issue 26 kept a scaled gradient, −1.0)."""
    assert code_loss(r=1.1, advantage=1.0, peer_ratios=[0.9]) == pytest.approx((-1.0, 0.0))


@pytest.mark.parametrize(("r", "advantage", "peers", "expected"), [
    (1.1, 1.0, [0.9, 1.4], (-1.0, 0.0)),     # the smallest peer decides the floor: still ρ
    (1.5, -1.0, [1.2], (1.2, 0.0)),          # m = 1.2 < 1.5: R = 1.2 constant (A < 0, PPO would not clip r)
    (0.8, 1.0, [0.5], (-0.8, -0.8)),         # r < ρ ≤ m: R = r, full gradient
    (1.1, 1.0, [], (-1.1, -0.55)),           # a lone learner, r ≥ ρ: m = r, a tie: half the gradient
    (1.05, 1.0, [1.3], (-1.05, -0.525)),     # a peer above r ≥ ρ: m = r, a tie again
    (1.3, 1.0, [], (-1.2, 0.0)),             # the tie inside PPO's clip: clipped, gradient 0
])
def test_code_form_value_and_gradient(r, advantage, peers, expected):
    assert code_loss(r=r, advantage=advantage, peer_ratios=peers) == pytest.approx(expected)
