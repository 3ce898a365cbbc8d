"""DQN learner: one gradient step per ``batch_size`` rows of the batch, target update when due.

The replay samples ``gradient_steps × batch_size`` rows per learner call; the update walks them in
consecutive minibatches. The cumulative step count lives in ``model.num_grad_steps``; the target is
copied (τ = 1) or Polyak-averaged whenever it reaches a multiple of ``target_update_interval``.

Example::

    result = dqn_update(model=model, optimizer=optimizer, batch=algo.postprocess(batch=rows), config=cfg)
    if cfg.prioritized:
        tree.update(indices=rows_idx, priorities=algo.priorities(td_errors=result.td_errors))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from nimbus.algos.dqn.config import DQNConfig
from nimbus.algos.dqn.loss import batch_td_loss
from nimbus.algos.step import DeviceStats, guarded_step
from nimbus.models.qnet import polyak_update

if TYPE_CHECKING:
    from nimbus.algos.dqn.model import DQNModel


@dataclass(frozen=True)
class DQNUpdateStats:
    """Scalars only (the learner function logs ``asdict(stats)`` as floats); means over the steps."""

    td_loss: float
    q_values: float             # mean Q(s, a) of the taken actions
    td_abs: float               # mean |target − Q(s, a)|
    grad_norm: float            # before clipping
    num_gradient_steps: int     # in this update (a non-finite minibatch is skipped: not counted)
    total_gradient_steps: int   # minibatches since the model was made (model.num_grad_steps)
    num_target_updates: int     # in this update


@dataclass(frozen=True)
class DQNUpdate:
    stats: DQNUpdateStats
    td_errors: np.ndarray       # [N] float32, target − Q(s, a) per batch row (for PER priorities); [0] unasked


def dqn_update(*, model: DQNModel, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
               config: DQNConfig, with_td_errors: bool = True) -> DQNUpdate:
    """One guarded step per ``batch_size`` rows (algos/step.py: a non-finite one changes nothing and is left out
    of the means). Host reads: the step count once, the statistics once, the TD errors once (``with_td_errors``).
    The target cadence counts minibatches on the host, a skipped one too."""
    n = batch["obs"].shape[0]
    params = list(model.q.parameters())
    stats = DeviceStats(keys=("td_loss", "q_values", "td_abs", "grad_norm"), device=batch["obs"].device)
    steps_before = int(model.num_grad_steps)  # read once: on a GPU each read of the buffer is a synchronisation
    td_errors, attempts, target_updates = [], 0, 0
    for start in range(0, n, config.batch_size):
        minibatch = {k: v[start:start + config.batch_size] for k, v in batch.items()}
        out = batch_td_loss(model=model, batch=minibatch, config=config)
        outcome = guarded_step(optimizer=optimizer, params=params, loss=out.loss, max_grad_norm=config.max_grad_norm)
        attempts += 1
        if (steps_before + attempts) % config.target_update_interval == 0:
            polyak_update(source=model.q, target=model.q_target, tau=config.tau)
            target_updates += 1
        td_errors.append(out.td_errors)
        stats.add(row=torch.stack([out.loss.detach(), out.q_taken.mean(), out.td_errors.abs().mean(),
                                   outcome.grad_norm]), where=outcome.finite)
    model.num_grad_steps += attempts
    means, steps, _ = stats.read()
    if not attempts:
        means = dict.fromkeys(means, 0.0)
    stats_out = DQNUpdateStats(**means, num_gradient_steps=steps, total_gradient_steps=steps_before + attempts,
                               num_target_updates=target_updates)
    errors = (torch.cat(td_errors).to(device="cpu", dtype=torch.float32).numpy() if td_errors and with_td_errors
              else np.zeros(0, np.float32))
    return DQNUpdate(stats=stats_out, td_errors=errors)
