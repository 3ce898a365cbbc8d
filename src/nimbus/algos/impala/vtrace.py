"""V-trace off-policy targets (Espeholt et al. 2018, §4.1), over time-major [T, B] tensors.

With ρ_t = min(ρ̄, π(a_t|x_t)/μ(a_t|x_t)) and c_t = min(c̄, π/μ):

    δ_t   = ρ_t · (r_t + γ_t · V(x_{t+1}) − V(x_t))
    v_t   = V(x_t) + δ_t + γ_t · c_t · (v_{t+1} − V(x_{t+1}))          (recursion, v_T = V(x_T))
    A^pg_t = ρ_t · (r_t + γ_t · v_{t+1} − V(x_t))

``discounts`` γ_t = γ·(1 − terminated_t) stop the bootstrap at a terminal state. A *truncated* step
(time limit) ends the episode inside the rollout without being terminal: the trace must not flow
into the next row (a new episode) and the bootstrap must come from the truncated episode's last
observation. Pass ``truncated`` and ``next_values`` = V(next_obs) for that; ``next_values`` is read
only at truncated steps. Without them, row t+1 is assumed to continue row t (the paper's setting).

Example::

    out = vtrace(behaviour_log_prob=mu_logp, target_log_prob=pi_logp.detach(), rewards=r,
                 values=v.detach(), bootstrap_value=v_last, discounts=0.99 * (1 - term))
    pg_loss = -(pi_logp * out.pg_advantages).mean(); vf_loss = 0.5 * ((v - out.vs) ** 2).mean()
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nimbus.algos.gae import reverse_discounted_sum


@dataclass(frozen=True)
class VTraceReturns:
    vs: torch.Tensor              # [T, B] value targets v_t
    pg_advantages: torch.Tensor   # [T, B] ρ_t (r_t + γ_t v_{t+1} − V(x_t))
    rhos: torch.Tensor            # [T, B] unclipped importance ratios π/μ (for logging)


@torch.no_grad()
def vtrace(*, behaviour_log_prob: torch.Tensor, target_log_prob: torch.Tensor, rewards: torch.Tensor,
           values: torch.Tensor, bootstrap_value: torch.Tensor, discounts: torch.Tensor,
           rho_bar: float = 1.0, c_bar: float = 1.0, truncated: torch.Tensor | None = None,
           next_values: torch.Tensor | None = None) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages; inputs [T, B] (bootstrap_value [B]); no grad."""
    if values.dim() != 2 or bootstrap_value.shape != values.shape[1:]:
        raise ValueError(f"values must be [T, B] and bootstrap_value [B], got {tuple(values.shape)} "
                         f"and {tuple(bootstrap_value.shape)}")
    for name, x in (("behaviour_log_prob", behaviour_log_prob), ("target_log_prob", target_log_prob),
                    ("rewards", rewards), ("discounts", discounts)):
        if x.shape != values.shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(values.shape)}")
    if (truncated is None) != (next_values is None):
        raise ValueError("pass truncated and next_values together (the bootstrap at a time-limit end)")

    rhos = torch.exp(target_log_prob - behaviour_log_prob)
    clipped_rhos = rhos.clamp(max=rho_bar)
    cs = rhos.clamp(max=c_bar)
    values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)  # V(x_{t+1}) in-rollout
    continues = torch.ones_like(values)
    if truncated is not None:
        cut = truncated.bool()
        values_tp1 = torch.where(cut, next_values, values_tp1)  # type: ignore[arg-type]
        continues = (~cut).to(values.dtype)

    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)
    # backward recursion on A_t = v_t − V(x_t) = δ_t + γ_t c_t A_{t+1}, with A_T = 0: a scan over T (algos/gae.py)
    vs_minus_v = reverse_discounted_sum(values=deltas.to(torch.float64),
                                        decay=(discounts * cs * continues).to(torch.float64)).to(values.dtype)
    vs = values + vs_minus_v
    # v_{t+1}: the next row's target when the episode continues in the rollout, else the bootstrap
    next_vs_minus_v = torch.cat([vs_minus_v[1:], torch.zeros_like(bootstrap_value).unsqueeze(0)], dim=0)
    vs_tp1 = values_tp1 + continues * next_vs_minus_v
    pg_rhos = rhos.clamp(max=rho_bar)
    pg_advantages = pg_rhos * (rewards + discounts * vs_tp1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages, rhos=rhos)
