"""Stellaris's cross-learner importance-sampling truncation (Eq. 2), shared by the PPO and IMPACT losses.

    r_self = π_self(a|s) / μ(a|s),  r_i = π_i(a|s) / μ(a|s) over the other learner policies of the aggregation
    paper: R = min(|min(r_self, min_i r_i)|, ρ)
    code:  R = min(r_self, max(min_i r_i, ρ))          (the authors' form, DESIGN.md §3)

R carries r_self's gradient scaled by R/r_self, so ∇(R·A) = R·A·∇log π_self, the paper's ∇J = E[R·A].

Example::

    truncation = Truncation(peer_log_prob_min=peer_log_prob, rho=1.0, form="paper")
    R = truncate(ratio=(log_prob - behaviour_log_prob).exp(), behaviour_log_prob=behaviour_log_prob,
                 truncation=truncation)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch


@dataclass(frozen=True)
class Truncation:
    """log min_i π_i(a|s) over the other learners, per row (+inf where there are none), ρ and the form."""

    peer_log_prob_min: torch.Tensor
    rho: float = 1.0
    form: Literal["paper", "code"] = "paper"


def truncated_ratio(*, ratio: torch.Tensor, peer_ratio_min: torch.Tensor, rho: float,
                    form: Literal["paper", "code"]) -> torch.Tensor:
    """Eq. 2 (``paper``) or the authors' form (``code``); the value R with r_self's gradient scaled by R/r_self."""
    with torch.no_grad():
        if form == "paper":
            target = torch.clamp(torch.minimum(ratio, peer_ratio_min).abs(), max=rho)
        else:
            target = torch.minimum(ratio, torch.clamp(peer_ratio_min, min=rho))
        factor = target / ratio
    return ratio * factor


def truncate(*, ratio: torch.Tensor, behaviour_log_prob: torch.Tensor, truncation: Truncation) -> torch.Tensor:
    """R for ``ratio`` = π_self/μ, the peers' ratios taken against the same behaviour log-probabilities."""
    peer_ratio_min = (truncation.peer_log_prob_min - behaviour_log_prob).exp()
    return truncated_ratio(ratio=ratio, peer_ratio_min=peer_ratio_min, rho=truncation.rho, form=truncation.form)


def truncated_fraction(*, log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor, truncation: Truncation) -> float:
    """The fraction of rows whose ratio π_self/μ the truncation changed."""
    with torch.no_grad():
        ratio = (log_prob - behaviour_log_prob).exp()
        truncated = truncate(ratio=ratio, behaviour_log_prob=behaviour_log_prob, truncation=truncation)
        return float((truncated < ratio * (1 - 1e-6)).float().mean())
