"""The networks of the on-policy multi-agent algorithms: a policy π(a|o) and a separate critic V(x).

The policy is CleanRL's actor MLP (models/mlp.py: orthogonal init, 0.01 gain on the head) with a
Categorical over logits for Discrete actions or a diagonal Gaussian with a state-independent log σ for
1-D Box actions. The critic is an MLP to one value (head gain 1.0); its input is the agent's observation
(IPPO) or state ⊕ one-hot(agent) (MAPPO). With ``value_norm`` (MAPPO's ValueNorm, Yu et al. 2022 §4) the
critic predicts returns standardised by running statistics kept in its own buffers, so they travel and are
versioned with its weights.

Example::

    policy = PolicyNet(observation_space=obs_space, action_space=gym.spaces.Discrete(5), hidden_sizes=(64, 64))
    log_prob, entropy = policy.evaluate(obs, actions=actions)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Distribution

from nimbus.errors import ConfigError
from nimbus.models import distributions
from nimbus.models.mlp import Activation, mlp


class PolicyNet(nn.Module):
    """π(·|o) over flattened Box observations; inputs are batch-first."""

    def __init__(self, *, observation_space: gym.Space, action_space: gym.Space, hidden_sizes: tuple[int, ...],
                 activation: Activation) -> None:
        super().__init__()
        if not isinstance(observation_space, gym.spaces.Box):
            raise ConfigError(f"the multi-agent policy needs a Box observation space, got {observation_space}")
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            width = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            width = int(action_space.shape[0])
        else:
            raise ConfigError(f"the multi-agent policy needs a Discrete or 1-D Box action space, got {action_space}")
        self.actor = mlp(in_features=int(np.prod(observation_space.shape)), hidden_sizes=tuple(hidden_sizes),
                         out_features=width, activation=activation, head_std=0.01)
        if not self.discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(1, width))

    def distribution(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> Distribution:
        """π(·|o); with ``action_mask`` (B × n, Discrete), the forbidden actions get probability 0."""
        out = self.actor(obs.reshape(obs.shape[0], -1).float())
        if action_mask is not None:
            out = distributions.mask_logits(logits=out, mask=action_mask)
        return distributions.policy(out=out, log_std=None if self.discrete else self.actor_logstd)

    def act(self, obs: torch.Tensor, *, explore: bool,
            action_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, log π(action|o)); a sample when exploring, the mode otherwise."""
        dist = self.distribution(obs, action_mask)
        action = dist.sample() if explore else distributions.mode(dist=dist)
        return action, distributions.log_prob(dist=dist, actions=action)

    def evaluate(self, obs: torch.Tensor, *, actions: torch.Tensor,
                 action_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(log π(actions|o), entropy of π(·|o)), each of shape (B,), with gradients."""
        dist = self.distribution(obs, action_mask)
        return distributions.log_prob(dist=dist, actions=actions), distributions.entropy(dist=dist)


class ReturnNorm(nn.Module):
    """Running mean and variance of the returns a critic has been fitted to (parallel Welford merge, float64
    buffers). Before its first ``update`` it is the identity (mean 0, variance 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("var", torch.ones((), dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def update(self, returns: torch.Tensor) -> None:
        batch = returns.detach().double()
        if batch.numel() == 0:
            return
        n, mean, var = float(batch.numel()), batch.mean(), batch.var(unbiased=False)
        if self.count == 0:
            self.mean.copy_(mean)
            self.var.copy_(var)
        else:
            total = self.count + n
            delta = mean - self.mean
            self.var.copy_((self.var * self.count + var * n + delta ** 2 * self.count * n / total) / total)
            self.mean.add_(delta * n / total)
        self.count.add_(n)

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        return ((values.double() - self.mean) / self._std()).float()

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        return (values.double() * self._std() + self.mean).float()

    def _std(self) -> torch.Tensor:
        return self.var.clamp(min=1e-8).sqrt()


class ValueNet(nn.Module):
    """V(x) for flat inputs of ``in_features``; returns shape (B,), in the units of ``return_norm`` (the identity
    unless the critic function updates it)."""

    def __init__(self, *, in_features: int, hidden_sizes: tuple[int, ...], activation: Activation) -> None:
        super().__init__()
        self.critic = mlp(in_features=in_features, hidden_sizes=tuple(hidden_sizes), out_features=1,
                          activation=activation, head_std=1.0)
        self.return_norm = ReturnNorm()

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.critic(inputs.reshape(inputs.shape[0], -1).float()).squeeze(-1)

    def values(self, inputs: torch.Tensor) -> torch.Tensor:
        """V(x) in return units."""
        return self.return_norm.denormalize(self(inputs))
