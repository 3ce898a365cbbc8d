"""Action distributions: Categorical for Discrete spaces, diagonal Gaussian for Box spaces.

A diagonal Gaussian is a `Normal` over each action dimension; its log-prob and entropy are summed
over the action dimensions (as CleanRL's ``probs.log_prob(action).sum(1)``), so both kinds return
one number per batch row.

An action mask (a Discrete env's legal actions, envs/masks.py) is applied to the logits before the Categorical
is built (`mask_logits`): an illegal action's logit becomes the dtype's lowest finite number, so its probability is
exactly 0, it is never sampled nor the mode, and it adds nothing to the entropy (0 · log 0 = 0); the sampling, the
log-prob and entropy of the loss and the greedy action all use this one masked distribution (as RLlib's and
BenchMARL's masked Categoricals).

Continuous policies output unbounded actions; the actor clips them to the action space just before
``env.step`` (`clip_action`), and the log-prob stored for the learner is of the unclipped action.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch.distributions import Categorical, Distribution, Normal


def policy(*, out: torch.Tensor, log_std: torch.Tensor | None) -> Distribution:
    """π(·|s) from the actor head's output: Categorical(logits=out) when ``log_std`` is None, else
    Normal(out, exp(log_std)) per action dimension.

    torch's argument validation is off: it checked every parameter tensor on every call (a quarter of
    an actor's forward pass on CartPole), and what it guards against cannot reach here — observations
    are checked at the env boundary (envs/checks.py) and the learner never publishes a non-finite
    update (train.max_nonfinite_losses)."""
    if log_std is None:
        return Categorical(logits=out, validate_args=False)
    return Normal(out, log_std.expand_as(out).exp(), validate_args=False)


def mask_logits(*, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``logits`` with every action ``mask`` forbids (False/0) at the dtype's lowest finite number; no gradient
    reaches a forbidden logit."""
    return logits.masked_fill(~mask.to(device=logits.device, dtype=torch.bool), torch.finfo(logits.dtype).min)


def log_prob(*, dist: Distribution, actions: torch.Tensor) -> torch.Tensor:
    """log π(a|s) per batch row, summed over action dimensions for a diagonal Gaussian."""
    if isinstance(dist, Normal):
        return dist.log_prob(actions).sum(dim=-1)
    if isinstance(dist, Categorical):
        return dist.log_prob(actions.long())
    raise TypeError(f"unsupported distribution {type(dist).__name__}")


def entropy(*, dist: Distribution) -> torch.Tensor:
    """Entropy per batch row, summed over action dimensions for a diagonal Gaussian."""
    if isinstance(dist, Normal):
        return dist.entropy().sum(dim=-1)
    return dist.entropy()


def mode(*, dist: Distribution) -> torch.Tensor:
    """The most likely action: the mean of a Gaussian, the arg-max of a Categorical."""
    if isinstance(dist, Normal):
        return dist.mean
    if isinstance(dist, Categorical):
        return dist.probs.argmax(dim=-1)
    raise TypeError(f"unsupported distribution {type(dist).__name__}")


def clip_action(*, action: np.ndarray, space: gym.Space) -> np.ndarray:
    """Clip a Box action to the space's bounds, cast to its dtype; other spaces' actions pass through."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(action, space.low, space.high).astype(space.dtype, copy=False)
    return action
