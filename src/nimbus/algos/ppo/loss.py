"""PPO's losses as pure functions over tensors (CleanRL ppo.py, lines "Policy loss" / "Value loss").

    ratio      = exp(log π_new(a|s) − log π_old(a|s))
    L_policy   = mean(max(−A · ratio, −A · clip(ratio, 1 − ε, 1 + ε)))
    L_value    = ½ · mean((V_new − R)²), or with vf_clip c:
                 ½ · mean(max((V_new − R)², (V_old + clip(V_new − V_old, −c, c) − R)²))
    L          = L_policy − ent_coef · mean(entropy) + vf_coef · L_value

With Stellaris's IS truncation (Eq. 2, algos/truncation.py; π_old is the behaviour policy μ): form ``paper``
weighs each row of the clipped surrogate by R/r_self (PPO's clip still decided on r_self); forms
``paper_ratio`` and ``code`` put R in place of r_self inside it.
"""

from __future__ import annotations

import torch

from nimbus.algos.base import LossOutput
from nimbus.algos.truncation import Truncation, surrogate_terms, truncated_fraction

_ADV_EPSILON = 1e-8
LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")  # ppo_loss's stats, in order


def policy_loss(
    *, new_log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, clip_coef: float,
    truncation: Truncation | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(clipped surrogate loss, approx_kl, clip_fraction); the last two are detached diagnostics.

    approx_kl is the low-variance estimator mean((ratio − 1) − log ratio) (Schulman's k3). With a
    `truncation`, the surrogate is truncated per its form (module docstring; the diagnostics stay those of r_self).
    """
    logratio = new_log_prob - old_log_prob
    ratio = logratio.exp()
    surrogate_ratio, weight = ratio, None
    if truncation is not None:
        surrogate_ratio, weight = surrogate_terms(ratio=ratio, behaviour_log_prob=old_log_prob, truncation=truncation)
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - logratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean()
    pg_loss1 = -advantages * surrogate_ratio
    pg_loss2 = -advantages * torch.clamp(surrogate_ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    rows = torch.max(pg_loss1, pg_loss2)
    return (rows if weight is None else rows * weight).mean(), approx_kl, clip_fraction


def value_loss(
    *, new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, vf_clip: float | None
) -> torch.Tensor:
    """½ · squared error to the returns; with vf_clip, the pessimum of clipped and unclipped (PPO2)."""
    unclipped = (new_values - returns) ** 2
    if vf_clip is None:
        return 0.5 * unclipped.mean()
    clipped_values = old_values + torch.clamp(new_values - old_values, -vf_clip, vf_clip)
    clipped = (clipped_values - returns) ** 2
    return 0.5 * torch.max(unclipped, clipped).mean()


def ppo_loss(
    *,
    new_log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    entropy: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip_coef: float,
    vf_clip: float | None,
    ent_coef: float,
    vf_coef: float,
    truncation: Truncation | None = None,
) -> LossOutput:
    """The total PPO loss and its parts (stats: policy_loss, value_loss, entropy, approx_kl, clip_fraction)."""
    loss, parts = ppo_loss_terms(
        new_log_prob=new_log_prob, old_log_prob=old_log_prob, advantages=advantages, entropy=entropy,
        new_values=new_values, old_values=old_values, returns=returns, clip_coef=clip_coef, vf_clip=vf_clip,
        ent_coef=ent_coef, vf_coef=vf_coef, truncation=truncation,
    )
    # one device read for the five (each .item() is a synchronisation on a GPU); float32 → the same floats
    stats = dict(zip(LOSS_STATS, parts.tolist(), strict=True))
    if truncation is not None:
        stats["truncated_fraction"] = truncated_fraction(log_prob=new_log_prob, behaviour_log_prob=old_log_prob,
                                                         truncation=truncation)
    return LossOutput(loss=loss, stats=stats)


def ppo_loss_terms(
    *, new_log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, entropy: torch.Tensor,
    new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip_coef: float,
    vf_clip: float | None, ent_coef: float, vf_coef: float, truncation: Truncation | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(total loss, its LOSS_STATS parts stacked and detached, on the device): `ppo_loss` without a host read."""
    pg_loss, approx_kl, clip_fraction = policy_loss(
        new_log_prob=new_log_prob, old_log_prob=old_log_prob, advantages=advantages, clip_coef=clip_coef,
        truncation=truncation,
    )
    v_loss = value_loss(new_values=new_values, old_values=old_values, returns=returns, vf_clip=vf_clip)
    entropy_loss = entropy.mean()
    loss = pg_loss - ent_coef * entropy_loss + vf_coef * v_loss
    parts = torch.stack([pg_loss.detach(), v_loss.detach(), entropy_loss.detach(), approx_kl, clip_fraction])
    return loss, parts


def normalize_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """(A − mean) / (std + 1e-8); a single advantage is only centred (its std is undefined)."""
    if advantages.numel() < 2:
        return advantages - advantages.mean()
    return (advantages - advantages.mean()) / (advantages.std() + _ADV_EPSILON)


def explained_variance(*, values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 − Var(R − V) / Var(R) (CleanRL's definition); 0.0, not NaN, when the returns do not vary.

    (A NaN statistic is an alarm downstream — the learner function treats it as a failed update.)
    """
    return float(explained_variance_tensor(values=values, returns=returns))


def explained_variance_tensor(*, values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """`explained_variance` as a 0-dim tensor on the device (no host read)."""
    var_returns = returns.var(unbiased=False)
    explained = 1.0 - (returns - values).var(unbiased=False) / var_returns
    return torch.where(var_returns == 0.0, torch.zeros_like(explained), explained)
