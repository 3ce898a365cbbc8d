"""Generalised advantage estimation over flat rows, keeping `terminated` and `truncated` apart.

Rows are steps; the rows of one (actor, env) arrive as a contiguous run in time order. Per row:

- ``values``       V(s_t)
- ``next_values``  V(s_{t+1}); after a truncation, V(final observation of the truncated episode);
                   on the last row of a fragment, V(the next observation)
- ``terminated``   s_{t+1} is terminal: no bootstrap
- ``cut``          the recursion stops after this row: terminated, truncated, or the fragment ends

    δ_t = r_t + γ · next_values_t · (1 − terminated_t) − V(s_t)
    A_t = δ_t + γλ · (1 − cut_t) · A_{t+1}
    returns_t = A_t + V(s_t)

A truncation therefore bootstraps from V(final observation) instead of treating the time limit as
a terminal state. Without truncations this equals CleanRL's GAE over (time, env) arrays.
"""

from __future__ import annotations

import torch


def compute_gae(
    *,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    cut: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), each shaped like `rewards` (1-D, one entry per row), dtype of `values`; computed in
    float64 on the rows' device, without a host read."""
    _check_rows(rewards=rewards, values=values, next_values=next_values, terminated=terminated, cut=cut)
    f64 = torch.float64
    not_terminal = 1.0 - terminated.to(f64)
    deltas = rewards.to(f64) + gamma * next_values.to(f64) * not_terminal - values.to(f64)
    decay = gamma * gae_lambda * (1.0 - cut.to(f64))
    advantages = reverse_discounted_sum(values=deltas, decay=decay)
    returns = advantages + values.to(f64)
    return advantages.to(values.dtype), returns.to(values.dtype)


def reverse_discounted_sum(*, values: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """A_t = values_t + decay_t · A_{t+1} along dim 0 (A past the end is 0), as tensor operations.

    A Hillis-Steele scan: ⌈log2 T⌉ rounds, each composing every element's affine map x ↦ v + d·x with the one 2^k
    rows later, so the kernels launched grow with log T, not T. It only multiplies and adds: no cumulative
    product is divided out (the closed form A_t = Σ_k (P_k / P_t) v_k with P a cumprod of the decays underflows for
    long runs at γλ < 1 and divides by zero at every cut), so it is as safe as the sequential loop; the sums are
    grouped differently, which in float64 moves the result by ~1e-15 relative.
    """
    acc, carry = values.flip(0), decay.flip(0)   # reversed: acc_i = v_i + d_i · acc_{i−1}
    step = 1
    while step < acc.shape[0]:
        acc = torch.cat([acc[:step], acc[step:] + carry[step:] * acc[:-step]])
        carry = torch.cat([carry[:step], carry[step:] * carry[:-step]])
        step *= 2
    return acc.flip(0)


def _check_rows(**columns: torch.Tensor) -> None:
    shapes = {name: tuple(column.shape) for name, column in columns.items()}
    if any(len(shape) != 1 for shape in shapes.values()) or len(set(shapes.values())) != 1:
        raise ValueError(f"compute_gae needs 1-D columns of one length, got shapes {shapes}")
