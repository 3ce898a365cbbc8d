"""The networks of the on-policy multi-agent algorithms: a policy π(a|o) and a separate critic V(x).

The policy is CleanRL's actor MLP (models/mlp.py: orthogonal init, 0.01 gain on the head) with a
Categorical over logits for Discrete actions or a diagonal Gaussian with a state-independent log σ for
1-D Box actions. The critic is an MLP to one value (head gain 1.0); its input is the agent's observation
(IPPO) or state ⊕ one-hot(agent) (MAPPO).

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

    def distribution(self, obs: torch.Tensor) -> Distribution:
        out = self.actor(obs.reshape(obs.shape[0], -1).float())
        return distributions.policy(out=out, log_std=None if self.discrete else self.actor_logstd)

    def act(self, obs: torch.Tensor, *, explore: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, log π(action|o)); a sample when exploring, the mode otherwise."""
        dist = self.distribution(obs)
        action = dist.sample() if explore else distributions.mode(dist=dist)
        return action, distributions.log_prob(dist=dist, actions=action)

    def evaluate(self, obs: torch.Tensor, *, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log π(actions|o), entropy of π(·|o)), each of shape (B,), with gradients."""
        dist = self.distribution(obs)
        return distributions.log_prob(dist=dist, actions=actions), distributions.entropy(dist=dist)


class ValueNet(nn.Module):
    """V(x) for flat inputs of ``in_features``; returns shape (B,)."""

    def __init__(self, *, in_features: int, hidden_sizes: tuple[int, ...], activation: Activation) -> None:
        super().__init__()
        self.critic = mlp(in_features=in_features, hidden_sizes=tuple(hidden_sizes), out_features=1,
                          activation=activation, head_std=1.0)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.critic(inputs.reshape(inputs.shape[0], -1).float()).squeeze(-1)
