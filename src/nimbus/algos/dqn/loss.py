"""DQN losses: pure functions over tensors (double DQN, n-step targets, Huber, PER weights).

The batch's ``returns_n`` and ``discount_n`` come from the replay: for a transition that started at t
and ran k ≤ n steps, ``returns_n = Σ_{i<k} γ^i r_{t+i}``, ``discount_n = γ^k·(1 − terminated)`` and
``next_obs`` is the observation after those k steps. For n = 1, ``DQN.postprocess`` fills them in
from ``rewards`` and ``terminated``. Truncation is not termination: it keeps ``discount_n > 0`` and
bootstraps from the truncated episode's last observation.

Example::

    target = double_q_target(q_next_online=q(next_obs), q_next_target=q_targ(next_obs),
                             returns_n=b["returns_n"], discount_n=b["discount_n"], double_q=True)
    out = td_loss(q_values=q(obs), actions=b["actions"], targets=target, weights=b["weights"])
    out.loss.backward(); replay.update_priorities(out.td_errors.abs())
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from nimbus.algos.dqn.config import DQNConfig
    from nimbus.algos.dqn.model import DQNModel


@dataclass(frozen=True)
class TDLoss:
    loss: torch.Tensor        # scalar, weighted mean of the per-sample Huber losses (has grad)
    td_errors: torch.Tensor   # [B] target − Q(s, a), detached: for PER priorities
    q_taken: torch.Tensor     # [B] Q(s, a), detached


def double_q_target(*, q_next_online: torch.Tensor, q_next_target: torch.Tensor, returns_n: torch.Tensor,
                    discount_n: torch.Tensor, double_q: bool) -> torch.Tensor:
    """y = returns_n + discount_n · Q_target(s', a*), a* = argmax_a Q_online(s', a) (van Hasselt 2016).

    With ``double_q=False`` a* = argmax_a Q_target(s', a) (Mnih 2015). Inputs [B, A] and [B]; no grad.
    """
    with torch.no_grad():
        selector = q_next_online if double_q else q_next_target
        best = selector.argmax(dim=1, keepdim=True)
        next_value = q_next_target.gather(1, best).squeeze(1)
        return returns_n.float() + discount_n.float() * next_value


def td_loss(*, q_values: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor,
            weights: torch.Tensor | None = None, huber_delta: float = 1.0) -> TDLoss:
    """Importance-weighted Huber loss between Q(s, a) and the (detached) targets."""
    q_taken = q_values.gather(1, actions.long().view(-1, 1)).squeeze(1)
    targets = targets.detach()
    per_sample = nn.functional.huber_loss(q_taken, targets, reduction="none", delta=huber_delta)
    loss = per_sample.mean() if weights is None else (weights.float() * per_sample).mean()
    return TDLoss(loss=loss, td_errors=(targets - q_taken).detach(), q_taken=q_taken.detach())


def one_step_targets(*, rewards: torch.Tensor, terminated: torch.Tensor,
                     gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(returns_n, discount_n) for n = 1: (r, γ·(1 − terminated))."""
    return rewards.float(), gamma * (1.0 - terminated.float())


def linear_schedule(*, start: float, end: float, fraction: float, progress: float) -> float:
    """start → end linearly over the first ``fraction`` of training, then end. progress ∈ [0, 1]."""
    if fraction <= 0:
        return end
    return start + (end - start) * min(1.0, max(0.0, progress) / fraction)


def epsilon_greedy(*, q_values: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The greedy action of each row of ``q_values`` [B, A], each replaced by a uniform one with probability
    ``epsilon`` (torch's global RNG: the random actions are drawn first, then the coin flips). No grad."""
    with torch.no_grad():
        actions = q_values.argmax(dim=1)
        random_actions = torch.randint(q_values.shape[1], actions.shape)
        return torch.where(torch.rand(actions.shape) < epsilon, random_actions, actions)


def batch_td_loss(*, model: DQNModel, batch: dict[str, torch.Tensor], config: DQNConfig) -> TDLoss:
    """The DQN loss on a sampled batch (keys: obs, actions, next_obs, returns_n, discount_n, weights?)."""
    with torch.no_grad():
        q_next_target = model.q_target(batch["next_obs"])
        q_next_online = model.q(batch["next_obs"]) if config.double_q else q_next_target
        targets = double_q_target(q_next_online=q_next_online, q_next_target=q_next_target,
                                  returns_n=batch["returns_n"], discount_n=batch["discount_n"],
                                  double_q=config.double_q)
    return td_loss(q_values=model.q(batch["obs"]), actions=batch["actions"], targets=targets,
                   weights=batch.get("weights"), huber_delta=config.huber_delta)
