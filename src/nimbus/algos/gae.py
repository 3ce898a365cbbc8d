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
    """(advantages, returns), each shaped like `rewards` (1-D, one entry per row), dtype of `values`."""
    _check_rows(rewards=rewards, values=values, next_values=next_values, terminated=terminated, cut=cut)
    f64 = torch.float64
    not_terminal = 1.0 - terminated.to(f64)
    deltas = rewards.to(f64) + gamma * next_values.to(f64) * not_terminal - values.to(f64)
    decay = gamma * gae_lambda * (1.0 - cut.to(f64))
    advantages = _reverse_discounted_sum(deltas=deltas.tolist(), decay=decay.tolist())
    advantages_t = torch.tensor(advantages, dtype=f64, device=values.device)  # the scan ran on the host
    returns = advantages_t + values.to(f64)
    return advantages_t.to(values.dtype), returns.to(values.dtype)


def _reverse_discounted_sum(*, deltas: list[float], decay: list[float]) -> list[float]:
    """A_t = δ_t + decay_t · A_{t+1}, scanned backwards over Python floats (≈ 0.2 µs per row)."""
    out = [0.0] * len(deltas)
    running = 0.0
    for i in range(len(deltas) - 1, -1, -1):
        running = deltas[i] + decay[i] * running
        out[i] = running
    return out


def _check_rows(**columns: torch.Tensor) -> None:
    shapes = {name: tuple(column.shape) for name, column in columns.items()}
    if any(len(shape) != 1 for shape in shapes.values()) or len(set(shapes.values())) != 1:
        raise ValueError(f"compute_gae needs 1-D columns of one length, got shapes {shapes}")
