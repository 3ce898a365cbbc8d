"""IMPALA and IMPACT losses over time-major [T, B] batches.

IMPALA (Espeholt et al. 2018): policy gradient with V-trace advantages, value regression to v_s,
entropy bonus; V-trace's target policy is the current policy.

IMPACT (Luo et al. 2020), as RLlib's APPO implements it (the code Stellaris ran): V-trace's target
policy is a *target network* π_tgt refreshed every few updates; the policy loss is PPO's clipped
surrogate over the ratio r = clip(μ/π_tgt, 0, 2) · π/μ (≈ π/π_tgt with a bounded IS correction).
With Stellaris's cross-learner truncation (Eq. 2, algos/truncation.py; ``train.workflow: stellaris``),
R = min(|min(π/μ, min_i π_i/μ)|, ρ) over the other learners' policies π_i: form ``paper`` weighs each row of the
clipped surrogate by R/(π/μ) (the clip still acts on clip(μ/π_tgt, 0, 2) · π/μ); ``paper_ratio`` and ``code``
put R in place of π/μ.

Batch keys: obs, actions, rewards, next_obs, terminated, truncated, behaviour_log_prob, each
[T, B, ...], with row t+1 continuing row t unless the episode ended at t.

Example::

    out = batch_loss(model=model, batch=batch, config=cfg)
    out.loss.backward()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.distributions import Distribution, Normal

from nimbus.algos.impala.vtrace import vtrace
from nimbus.algos.truncation import Truncation, surrogate_terms, truncated_fraction
from nimbus.models import distributions

if TYPE_CHECKING:
    from nimbus.algos.impala.config import ImpalaConfig
    from nimbus.algos.impala.model import ImpalaModel


@dataclass(frozen=True)
class ImpalaLoss:
    loss: torch.Tensor
    stat_tensors: dict[str, torch.Tensor]  # 0-dim, detached, on the device

    @property
    def stats(self) -> dict[str, float]:
        """``stat_tensors`` as floats: one device read for all of them."""
        values = torch.stack([value.to(torch.float64) for value in self.stat_tensors.values()]).tolist()
        return dict(zip(self.stat_tensors, values, strict=True))


def pg_loss(*, log_prob: torch.Tensor, pg_advantages: torch.Tensor) -> torch.Tensor:
    """IMPALA's policy loss: −E[A^pg · log π(a|s)] (advantages are constants)."""
    return -(log_prob * pg_advantages.detach()).mean()


def impact_surrogate_loss(*, log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor,
                          target_log_prob: torch.Tensor, pg_advantages: torch.Tensor, clip_param: float,
                          is_ratio_clip: float, truncation: Truncation | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """IMPACT's clipped surrogate; returns (loss, ratio the clip acts on). r = clip(μ/π_tgt, 0, c) · π/μ, with
    π/μ truncated across learners per ``truncation``'s form (module docstring)."""
    is_ratio = torch.exp(behaviour_log_prob - target_log_prob).clamp(0.0, is_ratio_clip).detach()
    self_ratio, weight = torch.exp(log_prob - behaviour_log_prob), None
    if truncation is not None:
        self_ratio, weight = surrogate_terms(ratio=self_ratio, behaviour_log_prob=behaviour_log_prob,
                                             truncation=truncation)
    ratio = is_ratio * self_ratio
    adv = pg_advantages.detach()
    surrogate = torch.min(adv * ratio, adv * ratio.clamp(1.0 - clip_param, 1.0 + clip_param))
    if weight is not None:
        surrogate = surrogate * weight
    return -surrogate.mean(), ratio.detach()


def time_major_log_prob(*, net: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """log π(a|s) of ``net``'s policy for every [T, B] element of a time-major batch (no grad taken here)."""
    T, B = batch["rewards"].shape
    dist = net.distribution(_flat(batch["obs"]))  # type: ignore[operator]
    return distributions.log_prob(dist=dist, actions=_flat(batch["actions"])).view(T, B)


def value_loss(*, values: torch.Tensor, vs: torch.Tensor) -> torch.Tensor:
    """0.5 · E[(V(x_t) − v_t)²] with v_t a constant."""
    return 0.5 * ((values - vs.detach()) ** 2).mean()


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def next_state_values(*, model: ImpalaModel, values: torch.Tensor,
                      batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(bootstrap_value [B], next_values [T, B]): V(next_obs) at the last row and at truncated steps.

    V is taken of every next observation and kept where needed: picking the truncated rows first would make
    the host wait for the device to learn how many there are."""
    with torch.no_grad():
        all_next = model.net.value(_flat(batch["next_obs"])).view(values.shape).to(values.dtype)
        next_values = torch.where(batch["truncated"].bool(), all_next, torch.zeros_like(values))
    return all_next[-1], next_values


def policy_kl(*, old: Distribution, new: Distribution) -> torch.Tensor:
    """KL(old ‖ new) per row, summed over the action dimensions of a diagonal Gaussian."""
    kl = torch.distributions.kl_divergence(old, new)
    return kl.sum(dim=-1) if isinstance(new, Normal) else kl


def batch_loss(*, model: ImpalaModel, batch: dict[str, torch.Tensor], config: ImpalaConfig,
               truncation: Truncation | None = None) -> ImpalaLoss:
    """The loss on a time-major batch; ``truncation`` (IMPACT only): log min_i π_i per [T, B] element."""
    T, B = batch["rewards"].shape
    obs, actions = _flat(batch["obs"]), _flat(batch["actions"])
    dist = model.net.distribution(obs)
    log_prob = distributions.log_prob(dist=dist, actions=actions).view(T, B)
    entropy = distributions.entropy(dist=dist).mean()
    values = model.net.value(obs).view(T, B)
    bootstrap_value, next_values = next_state_values(model=model, values=values, batch=batch)
    behaviour_log_prob = batch["behaviour_log_prob"].float()
    impact = config.variant == "impact"
    if impact:
        with torch.no_grad():
            target_dist = model.target_net.distribution(obs)
            target_log_prob = distributions.log_prob(dist=target_dist, actions=actions).view(T, B)
    else:
        target_log_prob = log_prob.detach()
    vt = vtrace(behaviour_log_prob=behaviour_log_prob, target_log_prob=target_log_prob,
                rewards=batch["rewards"].float(), values=values.detach(), bootstrap_value=bootstrap_value,
                discounts=config.gamma * (1.0 - batch["terminated"].float()), rho_bar=config.rho_bar,
                c_bar=config.c_bar, truncated=batch["truncated"], next_values=next_values)
    stats: dict[str, torch.Tensor] = {}
    if impact:
        policy_loss, ratio = impact_surrogate_loss(
            log_prob=log_prob, behaviour_log_prob=behaviour_log_prob, target_log_prob=target_log_prob,
            pg_advantages=vt.pg_advantages, clip_param=config.clip_param, is_ratio_clip=config.is_ratio_clip,
            truncation=truncation)
        if truncation is not None:
            stats["truncated_fraction"] = torch.tensor(truncated_fraction(  # a float: Stellaris's learner only
                log_prob=log_prob.detach(), behaviour_log_prob=behaviour_log_prob, truncation=truncation),
                device=log_prob.device)
        stats["losses/clip_fraction"] = ((ratio - 1.0).abs() > config.clip_param).float().mean()
        stats["losses/target_log_ratio_max"] = (log_prob.detach() - target_log_prob).abs().max()
    else:
        if truncation is not None:
            raise ValueError("the cross-learner truncation acts on IMPACT's ratio; variant impala has none")
        policy_loss = pg_loss(log_prob=log_prob, pg_advantages=vt.pg_advantages)
    v_loss = value_loss(values=values, vs=vt.vs)
    loss = policy_loss + config.vf_coef * v_loss - config.ent_coef * entropy
    if impact and config.kl_coeff > 0:
        kl = policy_kl(old=target_dist, new=dist).mean()
        loss = loss + config.kl_coeff * kl
        stats["losses/kl"] = kl.detach()
    stats.update({
        "losses/policy_loss": policy_loss.detach(),
        "losses/value_loss": v_loss.detach(),
        "losses/entropy": entropy.detach(),
        "losses/vtrace_rho_mean": vt.rhos.mean(),
        "losses/pg_advantage_mean": vt.pg_advantages.mean(),
    })
    return ImpalaLoss(loss=loss, stat_tensors=stats)
