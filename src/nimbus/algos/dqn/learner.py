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
from nimbus.models.qnet import polyak_update

if TYPE_CHECKING:
    from nimbus.algos.dqn.algorithm import DQNModel


@dataclass(frozen=True)
class DQNUpdateStats:
    """Scalars only (the learner function logs ``asdict(stats)`` as floats); means over the steps."""

    td_loss: float
    q_values: float             # mean Q(s, a) of the taken actions
    td_abs: float               # mean |target − Q(s, a)|
    grad_norm: float            # before clipping
    num_gradient_steps: int     # in this update
    total_gradient_steps: int   # since the model was made (model.num_grad_steps)
    num_target_updates: int     # in this update


@dataclass(frozen=True)
class DQNUpdate:
    stats: DQNUpdateStats
    td_errors: np.ndarray       # [N] float32, target − Q(s, a) per batch row (for PER priorities)


def dqn_update(*, model: DQNModel, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
               config: DQNConfig) -> DQNUpdate:
    n = batch["obs"].shape[0]
    max_norm = config.max_grad_norm if config.max_grad_norm is not None else float("inf")
    totals = {"td_loss": 0.0, "q_values": 0.0, "td_abs": 0.0, "grad_norm": 0.0}
    td_errors, steps, target_updates = [], 0, 0
    for start in range(0, n, config.batch_size):
        minibatch = {k: v[start:start + config.batch_size] for k, v in batch.items()}
        out = batch_td_loss(model=model, batch=minibatch, config=config)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.q.parameters(), max_norm)
        optimizer.step()
        model.num_grad_steps += 1
        if int(model.num_grad_steps) % config.target_update_interval == 0:
            polyak_update(source=model.q, target=model.q_target, tau=config.tau)
            target_updates += 1
        steps += 1
        td_errors.append(out.td_errors)
        totals["td_loss"] += float(out.loss.detach())
        totals["q_values"] += float(out.q_taken.mean())
        totals["td_abs"] += float(out.td_errors.abs().mean())
        totals["grad_norm"] += float(grad_norm)
    means = {k: v / max(steps, 1) for k, v in totals.items()}
    stats = DQNUpdateStats(**means, num_gradient_steps=steps, total_gradient_steps=int(model.num_grad_steps),
                           num_target_updates=target_updates)
    errors = torch.cat(td_errors).float().cpu().numpy() if td_errors else np.zeros(0, np.float32)
    return DQNUpdate(stats=stats, td_errors=errors)
