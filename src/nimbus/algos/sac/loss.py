"""SAC losses (Haarnoja et al. 2018): pure functions, plus the batch loss on a model.

The three losses touch disjoint parameters: the critic loss only the critics (targets are
constants), the actor loss only the actor (it reads the critics through *detached* parameters, so
the gradient flows into the action but not into Q), the α loss only log α (log π is a constant). So
their sum is one loss whose gradient is exactly the three gradients side by side: the generic
learner can backpropagate it once, and SAC's three optimizers each step their own group.

Example::

    out = batch_losses(model=model, batch=batch, config=cfg)
    (out.critic_loss + out.actor_loss + out.alpha_loss).backward()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.func import functional_call

if TYPE_CHECKING:
    from nimbus.algos.sac.config import SACConfig
    from nimbus.algos.sac.model import SACModel

LOSS_STATS = ("losses/qf_loss", "losses/actor_loss", "losses/alpha_loss", "losses/alpha", "losses/qf1_values",
              "losses/entropy")  # batch_losses's stats, in order


def soft_q_target(*, rewards: torch.Tensor, discounts: torch.Tensor, next_q1: torch.Tensor, next_q2: torch.Tensor,
                  next_log_prob: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """y = r + γ(1 − terminated) · (min(Q1', Q2')(s', a') − α · log π(a'|s')), a' ~ π(·|s'); no grad."""
    with torch.no_grad():
        return rewards + discounts * (torch.min(next_q1, next_q2) - alpha * next_log_prob)


def critic_loss(*, q1: torch.Tensor, q2: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """½ Σ_i MSE(Q_i(s, a), y), as Stable-Baselines3."""
    t = targets.detach()
    return 0.5 * (torch.nn.functional.mse_loss(q1, t) + torch.nn.functional.mse_loss(q2, t))


def actor_loss(*, log_prob: torch.Tensor, q_pi: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """E[α · log π(a|s) − min Q(s, a)], a ~ π(·|s) reparameterised."""
    return (alpha * log_prob - q_pi).mean()


def alpha_loss(*, log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """−E[log α · (log π + H̄)]: α grows while the entropy −log π is below the target H̄ (SB3's form)."""
    return -(log_alpha * (log_prob + target_entropy).detach()).mean()


@dataclass(frozen=True)
class SACLosses:
    critic_loss: torch.Tensor
    actor_loss: torch.Tensor
    alpha_loss: torch.Tensor      # zero (no grad) when α is fixed
    parts: torch.Tensor           # LOSS_STATS's values stacked, detached, on the device

    @property
    def total(self) -> torch.Tensor:
        return self.critic_loss + self.actor_loss + self.alpha_loss

    @property
    def stats(self) -> dict[str, float]:
        """``parts`` by name: one device read for the six (each float() of a tensor is a synchronisation on a GPU)."""
        return dict(zip(LOSS_STATS, self.parts.tolist(), strict=True))


def batch_losses(*, model: SACModel, batch: dict[str, torch.Tensor], config: SACConfig) -> SACLosses:
    """Keys: obs, actions (env scale), rewards, next_obs, terminated."""
    alpha = model.log_alpha.detach().exp()
    with torch.no_grad():
        next_actions, next_log_prob = model.actor.sample(batch["next_obs"])
        next_q1, next_q2 = model.critic_target(batch["next_obs"], next_actions)
        targets = soft_q_target(rewards=batch["rewards"].float(),
                                discounts=config.gamma * (1.0 - batch["terminated"].float()),
                                next_q1=next_q1, next_q2=next_q2, next_log_prob=next_log_prob, alpha=alpha)
    q1, q2 = model.critic(batch["obs"], model.normalize_actions(batch["actions"]))
    c_loss = critic_loss(q1=q1, q2=q2, targets=targets)

    actions_pi, log_prob = model.actor.sample(batch["obs"])
    frozen = {name: p.detach() for name, p in model.critic.named_parameters()}
    q1_pi, q2_pi = functional_call(model.critic, frozen, (batch["obs"], actions_pi))
    a_loss = actor_loss(log_prob=log_prob, q_pi=torch.min(q1_pi, q2_pi), alpha=alpha)
    if config.autotune_alpha:
        al_loss = alpha_loss(log_alpha=model.log_alpha, log_prob=log_prob, target_entropy=model.target_entropy)
    else:
        al_loss = torch.zeros((), device=c_loss.device)
    parts = torch.stack([c_loss.detach(), a_loss.detach(), al_loss.detach(), alpha, q1.detach().mean(),
                         -log_prob.detach().mean()])
    return SACLosses(critic_loss=c_loss, actor_loss=a_loss, alpha_loss=al_loss, parts=parts)
