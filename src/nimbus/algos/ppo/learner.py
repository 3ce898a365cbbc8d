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
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from nimbus.algos.base import LossOutput
from nimbus.algos.compiled import CompileMode, compiled
from nimbus.algos.ppo.config import PPOConfig, Schedule
from nimbus.algos.ppo.loss import LOSS_STATS, explained_variance_tensor, normalize_advantages, ppo_loss, ppo_loss_terms
from nimbus.algos.step import DeviceStats, guarded_step
from nimbus.algos.truncation import Truncation
from nimbus.models.mlp import ActorCritic, PolicyValueModel

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


def minibatch_loss(*, model: PolicyValueModel, batch: dict[str, torch.Tensor], config: PPOConfig, clip_coef: float,
                   truncation: Truncation | None = None) -> LossOutput:
    """The PPO loss of `model` on one (mini)batch, advantages normalised first if configured."""
    new_log_prob, entropy, new_values = model.evaluate(batch["obs"], actions=batch["actions"])
    return ppo_loss(**_loss_inputs(batch=batch, config=config, new_log_prob=new_log_prob, entropy=entropy,
                                   new_values=new_values), clip_coef=clip_coef, vf_clip=config.vf_clip,
                    ent_coef=config.ent_coef, vf_coef=config.vf_coef, truncation=truncation)


def minibatch_terms(*, model: PolicyValueModel, batch: dict[str, torch.Tensor], config: PPOConfig,
                    clip_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`minibatch_loss` without a host read: (loss, the LOSS_STATS parts stacked on the device)."""
    new_log_prob, entropy, new_values = model.evaluate(batch["obs"], actions=batch["actions"])
    return ppo_loss_terms(**_loss_inputs(batch=batch, config=config, new_log_prob=new_log_prob, entropy=entropy,
                                         new_values=new_values), clip_coef=clip_coef, vf_clip=config.vf_clip,
                          ent_coef=config.ent_coef, vf_coef=config.vf_coef)


def _loss_inputs(*, batch: dict[str, torch.Tensor], config: PPOConfig, new_log_prob: torch.Tensor,
                 entropy: torch.Tensor, new_values: torch.Tensor) -> dict[str, torch.Tensor]:
    advantages = batch["advantages"]
    if config.normalize_advantages:
        advantages = normalize_advantages(advantages)
    return {"new_log_prob": new_log_prob, "old_log_prob": batch["log_prob"], "advantages": advantages,
            "entropy": entropy, "new_values": new_values, "old_values": batch["values"], "returns": batch["returns"]}


def ppo_update(
    *,
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    config: PPOConfig,
    progress: float,
    generator: torch.Generator,
    compile_mode: CompileMode = "off",
) -> UpdateStats:
    """Run `config.num_epochs` epochs of minibatch PPO on `batch`; stop early when approx_kl > target_kl.
    ``compile_mode``: the minibatch's forward and loss compiled (algos/compiled.py), the step eager.

    No host read inside the minibatch loop: each epoch's order reaches the batch's device without a wait
    (`epoch_orders`) and the batch is gathered once per epoch (minibatches are slices of it), the statistics stay on
    the device (`DeviceStats`) and the non-finite guard is decided there (`guarded_step`). The host reads the
    statistics once at the end, and approx_kl once per epoch when ``target_kl`` is set.
    """
    missing = [key for key in REQUIRED_KEYS if key not in batch]
    if missing:
        raise KeyError(f"ppo_update needs batch keys {list(REQUIRED_KEYS)}; missing {missing} (run postprocess first)")
    lr = scheduled(value=config.lr, schedule=config.lr_schedule, progress=progress)
    clip_coef = scheduled(value=config.clip_coef, schedule=config.clip_schedule, progress=progress)
    for group in optimizer.param_groups:
        group["lr"] = lr
    device = batch["obs"].device
    num_rows = batch["obs"].shape[0]
    minibatch_size = min(config.minibatch_size, num_rows)
    params = list(model.parameters())
    terms = compiled(fn=_terms(config=config), key=("ppo", config.model_dump_json()), mode=compile_mode)
    clip = clip_coef if compile_mode == "off" else torch.tensor(clip_coef, device=device)  # a tensor: no recompile
    stats = DeviceStats(keys=(*LOSS_STATS, "grad_norm"), device=device)  # means over the steps taken
    attempts = epochs_done = 0
    for order in epoch_orders(generator=generator, num_rows=num_rows, num_epochs=config.num_epochs, device=device):
        shuffled = {key: batch[key][order] for key in REQUIRED_KEYS}  # one gather per column and epoch
        last_kl = torch.zeros((), device=device)
        for start in range(0, num_rows, minibatch_size):
            minibatch = {key: column[start : start + minibatch_size] for key, column in shuffled.items()}
            loss, parts = terms(model, minibatch, clip)
            outcome = guarded_step(optimizer=optimizer, params=params, loss=loss, max_grad_norm=config.max_grad_norm)
            stats.add(row=torch.cat([parts, outcome.grad_norm.reshape(1).to(parts.dtype)]), where=outcome.finite)
            last_kl = torch.where(outcome.finite, parts[LOSS_STATS.index("approx_kl")], last_kl)
            attempts += 1
        epochs_done += 1
        if config.target_kl is not None and (kl := float(last_kl)) > config.target_kl:  # one read per epoch
            logger.debug("target_kl %.4f reached (approx_kl %.4f) after %d epoch(s)", config.target_kl, kl, epochs_done)
            break
    ev = explained_variance_tensor(values=batch["values"], returns=batch["returns"])
    means, steps, (explained,) = stats.read(extra=[ev])  # the update's one read; NaN means when no step was taken
    if steps < attempts:
        logger.warning("skipped %d of %d PPO minibatches: non-finite loss or gradient norm", attempts - steps, attempts)
    return UpdateStats(
        **means,
        explained_variance=explained,
        num_gradient_steps=steps,
        lr=lr,
        clip_coef=clip_coef,
        num_epochs_done=epochs_done,
        num_skipped_steps=attempts - steps,
    )


def _terms(*, config: PPOConfig) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """`minibatch_terms` for ``config`` as a positional function of (model, minibatch, clip_coef), for `compiled`."""
    def terms(model: ActorCritic, minibatch: dict[str, torch.Tensor],
              clip_coef: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return minibatch_terms(model=model, batch=minibatch, config=config, clip_coef=clip_coef)  # type: ignore[arg-type]
    return terms


def epoch_orders(*, generator: torch.Generator, num_rows: int, num_epochs: int,
                 device: torch.device) -> Iterator[torch.Tensor]:
    """Each epoch's random order of the rows, on ``device``, from the host ``generator``: on the CPU one
    ``randperm`` per epoch as it starts (the sequence the update always drew); on another device every epoch's
    order drawn up front and copied in one asynchronous transfer, so the device never waits for the host inside
    the update and the order is the CPU's (a CUDA update equals the CPU one; tests/gpu checks it)."""
    if device.type == "cpu":
        for _ in range(num_epochs):
            yield torch.randperm(num_rows, generator=generator)
        return
    host = torch.stack([torch.randperm(num_rows, generator=generator) for _ in range(num_epochs)])
    yield from (host.pin_memory() if device.type == "cuda" else host).to(device, non_blocking=True)

