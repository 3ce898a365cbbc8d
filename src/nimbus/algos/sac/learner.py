"""SAC learner: per ``batch_size`` rows, one backward pass over the summed losses and one step of the
optimizer, whose three parameter groups (critic, actor, α) are SAC's three optimizers; then the
Polyak update of the target critics when due.

One Adam with three groups is step-for-step identical to three Adams (Adam's state is per
parameter and the three gradients touch disjoint parameters), and it is the single optimizer object
the generic learner function checkpoints. Each group can take its own lr.

The actor loss reads the critics as they were before this step's critic update (SB3 reads the
updated critics); the three gradients come from one forward pass, as in the original softlearning.

Example::

    optimizer = algo.make_optimizer(model=model)
    stats = sac_update(model=model, optimizer=optimizer, batch=rows, config=cfg)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from nimbus.algos.sac.config import SACConfig
from nimbus.algos.sac.loss import LOSS_STATS, batch_losses
from nimbus.algos.step import DeviceStats, guarded_step, make_adam, param_device
from nimbus.models.qnet import polyak_update

if TYPE_CHECKING:
    from nimbus.algos.sac.model import SACModel


@dataclass(frozen=True)
class SACUpdateStats:
    """Scalars only (the learner function logs ``asdict(stats)`` as floats); means over the steps."""

    qf_loss: float
    actor_loss: float
    alpha_loss: float
    alpha: float                # α used by the losses (before this update's α step)
    entropy: float              # −mean log π(a|s) of the sampled actions
    qf1_values: float
    num_gradient_steps: int     # in this update
    total_gradient_steps: int   # since the model was made (model.num_grad_steps)


def make_optimizer(*, model: SACModel, config: SACConfig) -> torch.optim.Optimizer:
    """Adam with parameter groups "critic", "actor" and (when α is learned) "alpha": fused on CUDA, foreach (multi-
    tensor: small nets are overhead-bound) elsewhere."""
    groups = [{"params": list(model.critic.parameters()), "name": "critic"},
              {"params": list(model.actor.parameters()), "name": "actor"}]
    if config.autotune_alpha:
        groups.append({"params": [model.log_alpha], "name": "alpha"})
    return make_adam(params=groups, lr=config.lr, device=param_device(model))


def sac_update(*, model: SACModel, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
               config: SACConfig) -> SACUpdateStats:
    """One guarded step per ``batch_size`` rows (algos/step.py: a non-finite one changes nothing and is left out
    of the means); the statistics are read once. The target cadence counts minibatches, a skipped one too."""
    n = batch["obs"].shape[0]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    stats = DeviceStats(keys=LOSS_STATS, device=batch["obs"].device)
    attempts = 0
    steps_before = int(model.num_grad_steps)  # read once: on a GPU each read of the buffer is a synchronisation
    for start in range(0, n, config.batch_size):
        minibatch = {k: v[start:start + config.batch_size] for k, v in batch.items()}
        out = batch_losses(model=model, batch=minibatch, config=config)
        outcome = guarded_step(optimizer=optimizer, params=params, loss=out.total, max_grad_norm=None)
        attempts += 1
        if (steps_before + attempts) % config.target_update_interval == 0:
            polyak_update(source=model.critic, target=model.critic_target, tau=config.tau)
        stats.add(row=out.parts, where=outcome.finite)
    model.num_grad_steps += attempts
    totals, steps, _ = stats.read()
    means = {key.removeprefix("losses/"): (total if attempts else 0.0) for key, total in totals.items()}
    return SACUpdateStats(**means, num_gradient_steps=steps, total_gradient_steps=steps_before + attempts)
