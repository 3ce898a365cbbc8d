"""IMPALA / IMPACT learner: one gradient step on a time-major batch; IMPACT refreshes its target.

Example::

    optimizer = algo.make_optimizer(model=model)
    stats = impala_update(model=model, optimizer=optimizer, batch=algo.postprocess(batch=rows), config=cfg)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from nimbus.algos.impala.config import ImpalaConfig
from nimbus.algos.impala.loss import batch_loss
from nimbus.algos.step import guarded_step
from nimbus.models.qnet import polyak_update

if TYPE_CHECKING:
    from nimbus.algos.impala.model import ImpalaModel


@dataclass(frozen=True)
class ImpalaUpdateStats:
    """Scalars only (the learner function logs ``asdict(stats)`` as floats)."""

    policy_loss: float
    value_loss: float
    entropy: float
    kl: float                    # KL(π_target ‖ π); 0 for IMPALA or kl_coeff = 0
    clip_fraction: float         # IMPACT: share of ratios outside [1 − clip, 1 + clip]
    target_log_ratio_max: float  # IMPACT: max |log π − log π_target| at the loss (0: the target is π)
    vtrace_rho_mean: float       # mean unclipped π/μ (off-policyness of the batch)
    grad_norm: float             # before clipping
    num_gradient_steps: int      # in this update (1)
    total_gradient_steps: int    # since the model was made (model.num_grad_steps)
    target_updated: bool


def advance_target(*, model: ImpalaModel, config: ImpalaConfig) -> bool:
    """Count one optimizer step; IMPACT's target takes τ of π every ``target_update_interval`` steps.
    Returns whether it was refreshed. (The learner function and Stellaris's parameter function both call it
    after each step, so the cadence is in optimizer steps wherever they are taken.)"""
    model.num_grad_steps += 1
    refreshed = model.target_net is not None and int(model.num_grad_steps) % config.target_update_interval == 0
    if refreshed:
        polyak_update(source=model.net, target=model.target_net, tau=config.target_tau)
    return refreshed


def impala_update(*, model: ImpalaModel, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
                  config: ImpalaConfig) -> ImpalaUpdateStats:
    """One guarded step (algos/step.py: a non-finite one changes nothing and its statistics are NaN); the
    statistics are read once, the step count once (`advance_target`)."""
    out = batch_loss(model=model, batch=batch, config=config)
    outcome = guarded_step(optimizer=optimizer, params=list(model.net.parameters()), loss=out.loss,
                           max_grad_norm=config.max_grad_norm)
    target_updated = advance_target(model=model, config=config)
    names = list(out.stat_tensors)
    row = torch.stack([*(out.stat_tensors[name].to(torch.float64) for name in names),
                       outcome.grad_norm.to(torch.float64)])
    count = model.num_grad_steps.to(torch.float64).reshape(1)
    *values, total = torch.cat([torch.where(outcome.finite, row, float("nan")), count]).tolist()  # one read
    s = dict(zip(names, values))
    return ImpalaUpdateStats(
        policy_loss=s["losses/policy_loss"], value_loss=s["losses/value_loss"], entropy=s["losses/entropy"],
        kl=s.get("losses/kl", 0.0), clip_fraction=s.get("losses/clip_fraction", 0.0),
        target_log_ratio_max=s.get("losses/target_log_ratio_max", 0.0),
        vtrace_rho_mean=s["losses/vtrace_rho_mean"], grad_norm=values[-1], num_gradient_steps=1,
        total_gradient_steps=int(total), target_updated=target_updated,
    )
