"""Stellaris's cross-learner importance-sampling truncation (Eq. 2), shared by the PPO and IMPACT losses.

    r_self = π_self(a|s) / μ(a|s),  r_i = π_i(a|s) / μ(a|s) over the other learner policies of the aggregation
    R      = min(|min(r_self, min_i r_i)|, ρ)                          (Eq. 2)

Where R enters the clipped surrogate is the form:

``paper`` (the default): PPO's clip is decided on the learner's own ratio r_self, as in PPO, and R weighs
    each row: row = (R / r_self) · clipped_surrogate(r_self), the weight a constant. Where PPO does not clip,
    ∇row = R · A · ∇log π_self, the paper's ∇J = E[R · A]; where PPO clips, the gradient stays 0.
    With ρ = 1, putting R in place of the ratio (``paper_ratio``) caps every ratio at 1 < 1 + ε, so
    PPO's upper clip never acts for a positive advantage (r 1.5, A +1: PPO's gradient 0, R's −1); the paper
    states Eq. 2 as a truncated IS weight on a policy gradient and says it integrates with clipped objectives,
    not that it replaces their clip, so the default keeps the clip.
``paper_ratio``: R replaces r_self inside the clipped surrogate, carrying r_self's gradient scaled by R/r_self
    (kept to compare with the default).
``code``: the authors' ``ppo_loss`` (IntelliSys-Lab/Stellaris-SC24, rllib/policy/torch_policy_v2.py at commit
    dff0e0d "Fix typos"): the floor m = max(min(r_self, min_i r_i), ρ), taken over constants (their ratios are
    detached, r_self's too), then R = elementwise-minimum(r_self, m) replaces the ratio in the clipped
    surrogate. A row where m < r_self is the constant m: no gradient (r 1.1, A +1, a peer at 0.9: R = 1.0
    and the gradient is 0). A row where m = r_self (r_self ≥ ρ and no peer below it, e.g. every row ≥ ρ of a
    lone learner) is a tie of the elementwise minimum, whose gradient PyTorch splits equally between its
    inputs: r_self keeps half its gradient. Both are reproduced exactly. dff0e0d is followed, not the
    initial commit 0f96794, whose same lines take the *maximum* over the ratios: that floor is ≥ r_self, so
    the minimum returns r_self and the truncation does nothing to the value (only the tie halves gradients);
    dff0e0d is the later commit, its message says it fixes that typo, and its minimum is the paper's min_i.
    (Their IMPACT/APPO loss has no truncation; nimbus applies the same ``code`` R to π/μ there.)

Example::

    truncation = Truncation(peer_log_prob_min=peer_log_prob, rho=1.0, form="paper")
    inner, weight = surrogate_terms(ratio=ratio, behaviour_log_prob=behaviour_log_prob, truncation=truncation)
    rows = clipped_surrogate_rows(inner)                   # the loss's own clip
    rows = rows if weight is None else rows * weight
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Form = Literal["paper", "paper_ratio", "code"]
FORMS: tuple[str, ...] = ("paper", "paper_ratio", "code")


@dataclass(frozen=True)
class Truncation:
    """log min_i π_i(a|s) over the other learners, per row (+inf where there are none), ρ and the form."""

    peer_log_prob_min: torch.Tensor
    rho: float = 1.0
    form: Form = "paper"


def truncated_ratio(*, ratio: torch.Tensor, peer_ratio_min: torch.Tensor, rho: float, form: Form) -> torch.Tensor:
    """R as a tensor with a gradient: ``paper``/``paper_ratio``: Eq. 2's value, r_self's gradient scaled by
    R/r_self; ``code``: the authors' elementwise minimum (constant rows, halved ties; module docstring)."""
    if form == "code":
        floor = torch.clamp_min(torch.minimum(ratio.detach(), peer_ratio_min), rho)
        return torch.minimum(ratio, floor)
    if form not in FORMS:
        raise ValueError(f"unknown truncation form {form!r}; expected one of {FORMS}")
    with torch.no_grad():
        factor = _paper_value(ratio=ratio, peer_ratio_min=peer_ratio_min, rho=rho) / ratio
    return ratio * factor


def _paper_value(*, ratio: torch.Tensor, peer_ratio_min: torch.Tensor, rho: float) -> torch.Tensor:
    return torch.clamp(torch.minimum(ratio, peer_ratio_min).abs(), max=rho)


def truncate(*, ratio: torch.Tensor, behaviour_log_prob: torch.Tensor, truncation: Truncation) -> torch.Tensor:
    """R for ``ratio`` = π_self/μ, the peers' ratios taken against the same behaviour log-probabilities."""
    return truncated_ratio(ratio=ratio, peer_ratio_min=_peer_ratio_min(behaviour_log_prob=behaviour_log_prob,
                                                                       truncation=truncation),
                           rho=truncation.rho, form=truncation.form)


def _peer_ratio_min(*, behaviour_log_prob: torch.Tensor, truncation: Truncation) -> torch.Tensor:
    return (truncation.peer_log_prob_min - behaviour_log_prob).exp()


def surrogate_terms(*, ratio: torch.Tensor, behaviour_log_prob: torch.Tensor,
                    truncation: Truncation) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the ratio the loss's clip acts on, a constant weight per row of the clipped surrogate or None).

    ``paper``: (r_self, R/r_self); ``paper_ratio`` and ``code``: (R, None)."""
    if truncation.form != "paper":
        return truncate(ratio=ratio, behaviour_log_prob=behaviour_log_prob, truncation=truncation), None
    with torch.no_grad():
        peer = _peer_ratio_min(behaviour_log_prob=behaviour_log_prob, truncation=truncation)
        weight = _paper_value(ratio=ratio, peer_ratio_min=peer, rho=truncation.rho) / ratio
    return ratio, weight


def truncated_fraction(*, log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor, truncation: Truncation) -> float:
    """The fraction of rows whose ratio π_self/μ the truncation lowered (R < r_self)."""
    with torch.no_grad():
        ratio = (log_prob - behaviour_log_prob).exp()
        truncated = truncate(ratio=ratio, behaviour_log_prob=behaviour_log_prob, truncation=truncation)
        return float((truncated < ratio * (1 - 1e-6)).float().mean())
