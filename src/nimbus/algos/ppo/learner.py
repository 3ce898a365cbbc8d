"""PPO's update: minibatch epochs over a post-processed batch (CleanRL ppo.py, "Optimizing").

The batch already holds ``advantages`` and ``returns`` (`PPO.postprocess`); this module only
optimises. Each epoch draws a permutation from the caller's `generator`, so the same generator state
gives the same update. A minibatch whose loss or gradient is not finite is skipped (weights kept)
and counted in `UpdateStats.num_skipped_steps`; when every minibatch was skipped the loss statistics
are NaN. The caller decides when too many in a row stop the run.

Example::

    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, eps=config.adam_eps)
    stats = ppo_update(model=model, optimizer=optimizer, batch=algo.postprocess(batch=rows),
                       config=config, progress=step / total_steps, generator=torch.Generator().manual_seed(0))
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
from torch import nn

from nimbus.algos.base import LossOutput
from nimbus.algos.ppo.config import PPOConfig, Schedule
from nimbus.algos.truncation import Truncation
from nimbus.liveness import beat
from nimbus.algos.ppo.loss import LOSS_STATS, explained_variance, normalize_advantages, ppo_loss
from nimbus.models.mlp import ActorCritic

logger = logging.getLogger(__name__)

REQUIRED_KEYS = ("obs", "actions", "log_prob", "values", "advantages", "returns")


@dataclass(frozen=True)
class UpdateStats:
    policy_loss: float  # means over the gradient steps taken
    value_loss: float
    entropy: float
    approx_kl: float
    clip_fraction: float
    explained_variance: float  # of the rollout values for the returns, over the whole batch
    grad_norm: float  # mean gradient norm before clipping
    num_gradient_steps: int
    lr: float
    clip_coef: float = 0.0
    num_epochs_done: int = 0  # < config.num_epochs when target_kl stopped the update early
    num_skipped_steps: int = 0  # minibatches skipped for a non-finite loss or gradient


def scheduled(*, value: float, schedule: Schedule, progress: float) -> float:
    """`value` for "constant"; value · (1 − progress) for "linear" (progress clamped to [0, 1])."""
    if schedule == "constant":
        return value
    return value * (1.0 - min(max(progress, 0.0), 1.0))


def minibatch_loss(*, model: ActorCritic, batch: dict[str, torch.Tensor], config: PPOConfig, clip_coef: float,
                   truncation: Truncation | None = None) -> LossOutput:
    """The PPO loss of `model` on one (mini)batch, advantages normalised first if configured."""
    new_log_prob, entropy, new_values = model.evaluate(batch["obs"], actions=batch["actions"])
    advantages = batch["advantages"]
    if config.normalize_advantages:
        advantages = normalize_advantages(advantages)
    return ppo_loss(
        new_log_prob=new_log_prob,
        old_log_prob=batch["log_prob"],
        advantages=advantages,
        entropy=entropy,
        new_values=new_values,
        old_values=batch["values"],
        returns=batch["returns"],
        clip_coef=clip_coef,
        vf_clip=config.vf_clip,
        ent_coef=config.ent_coef,
        vf_coef=config.vf_coef,
        truncation=truncation,
    )


def ppo_update(
    *,
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    config: PPOConfig,
    progress: float,
    generator: torch.Generator,
) -> UpdateStats:
    """Run `config.num_epochs` epochs of minibatch PPO on `batch`; stop early when approx_kl > target_kl."""
    missing = [key for key in REQUIRED_KEYS if key not in batch]
    if missing:
        raise KeyError(f"ppo_update needs batch keys {list(REQUIRED_KEYS)}; missing {missing} (run postprocess first)")
    lr = scheduled(value=config.lr, schedule=config.lr_schedule, progress=progress)
    clip_coef = scheduled(value=config.clip_coef, schedule=config.clip_schedule, progress=progress)
    for group in optimizer.param_groups:
        group["lr"] = lr
    num_rows = batch["obs"].shape[0]
    minibatch_size = min(config.minibatch_size, num_rows)
    totals = dict.fromkeys((*LOSS_STATS, "grad_norm"), 0.0)   # averaged over the steps taken
    steps = skipped = epochs_done = 0
    for _ in range(config.num_epochs):
        order = torch.randperm(num_rows, generator=generator)
        last_kl = 0.0
        for start in range(0, num_rows, minibatch_size):
            rows = order[start : start + minibatch_size]
            minibatch = {key: batch[key][rows] for key in REQUIRED_KEYS}
            out = minibatch_loss(model=model, batch=minibatch, config=config, clip_coef=clip_coef)
            grad_norm = gradient_step(model=model, optimizer=optimizer, loss=out.loss,
                                      max_grad_norm=config.max_grad_norm)
            if grad_norm is None:
                skipped += 1
                continue
            steps += 1
            last_kl = out.stats["approx_kl"]
            for key in LOSS_STATS:
                totals[key] += out.stats[key]
            totals["grad_norm"] += grad_norm
        epochs_done += 1
        if config.target_kl is not None and last_kl > config.target_kl:
            logger.debug("target_kl %.4f reached (approx_kl %.4f) after %d epoch(s)", config.target_kl, last_kl, epochs_done)
            break
    # no finite step at all: NaN losses, so a caller that checks the stats sees the failure
    means = {key: total / steps if steps else float("nan") for key, total in totals.items()}
    return UpdateStats(
        **means,
        explained_variance=explained_variance(values=batch["values"], returns=batch["returns"]),
        num_gradient_steps=steps,
        lr=lr,
        clip_coef=clip_coef,
        num_epochs_done=epochs_done,
        num_skipped_steps=skipped,
    )


def gradient_step(*, model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                  max_grad_norm: float) -> float | None:
    """Backward, clip, step; returns the pre-clip gradient norm, or None (no step) if it is not finite."""
    beat()  # progress per minibatch (P5), a skipped one too; the optimizer hook beats again after the step
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # a non-finite loss is backed too and then skipped: one device read for both checks below
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    loss_value, grad_norm = torch.stack([loss.detach().double(), norm.double()]).tolist()  # exact for float32
    if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        logger.warning("skipping a PPO minibatch: non-finite %s", f"loss {loss_value}" if not math.isfinite(loss_value)
                       else f"gradient norm {grad_norm}")
        return None
    optimizer.step()
    return grad_norm
