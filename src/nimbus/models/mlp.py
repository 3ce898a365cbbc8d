"""Actor-critic MLP for Box observations, as CleanRL's ppo.py / ppo_continuous_action.py.

Separate actor and critic networks; orthogonal init with gain sqrt(2) on hidden layers, 0.01 on the
policy head and 1.0 on the value head, zero biases. Discrete actions: Categorical over logits.
Box actions: diagonal Gaussian with a state-independent, learned log-std (initialised to 0).

Example::

    model = ActorCritic(observation_space=env.observation_space, action_space=env.action_space)
    with torch.no_grad():
        action, log_prob, value = model.act(torch.as_tensor(obs[None]), explore=True)
"""

from __future__ import annotations

import math
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Distribution

from nimbus.errors import ConfigError
from nimbus.models import distributions

Activation = Literal["tanh", "relu"]
_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def layer_init(layer: nn.Linear, *, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain `std`, constant bias (CleanRL's layer_init)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(*, in_features: int, hidden_sizes: tuple[int, ...], out_features: int, activation: Activation,
        head_std: float) -> nn.Sequential:
    """Linear → activation blocks, then a linear head initialised with gain `head_std`."""
    layers: list[nn.Module] = []
    width = in_features
    for hidden in hidden_sizes:
        layers += [layer_init(nn.Linear(width, hidden)), _ACTIVATIONS[activation]()]
        width = hidden
    layers.append(layer_init(nn.Linear(width, out_features), std=head_std))
    return nn.Sequential(*layers)


class PolicyValueModel(nn.Module):
    """What every on-policy model offers the actor and the learner: ``act`` and ``evaluate``, built on the
    subclass's ``distribution`` (π(·|s)) and ``value`` (V(s)). ``discrete`` and, for continuous actions,
    the state-independent ``actor_logstd`` are set by ``_init_policy_head``."""

    discrete: bool

    def _policy_head_width(self, *, action_space: gym.Space) -> int:
        """Read the action space (Discrete or 1-D Box): sets ``discrete``; returns the policy head's width."""
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            return int(action_space.n)
        if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            return int(action_space.shape[0])
        raise ConfigError(f"{type(self).__name__} needs a Discrete or 1-D Box action space, got {action_space}")

    def _add_log_std(self, *, width: int) -> None:
        """Continuous actions: the state-independent log σ, registered after the heads (parameter order is
        the optimizer state's order in checkpoints)."""
        if not self.discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(1, width))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def distribution(self, obs: torch.Tensor) -> Distribution:
        raise NotImplementedError

    def act(self, obs: torch.Tensor, *, explore: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, log π(action|s), V(s)); a sample when exploring, the mode otherwise."""
        dist = self.distribution(obs)
        action = dist.sample() if explore else distributions.mode(dist=dist)
        return action, distributions.log_prob(dist=dist, actions=action), self.value(obs)

    def evaluate(self, obs: torch.Tensor, *, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log π(actions|s), entropy of π(·|s), V(s)), each of shape (B,), with gradients."""
        dist = self.distribution(obs)
        log_prob = distributions.log_prob(dist=dist, actions=actions)
        return log_prob, distributions.entropy(dist=dist), self.value(obs)


class ActorCritic(PolicyValueModel):
    """π(a|s) and V(s) over flattened Box observations; inputs are batch-first."""

    def __init__(
        self,
        *,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: Activation = "tanh",
    ) -> None:
        super().__init__()
        if not isinstance(observation_space, gym.spaces.Box):
            raise ConfigError(f"ActorCritic needs a Box observation space, got {observation_space}")
        obs_dim = int(np.prod(observation_space.shape))
        common = {"in_features": obs_dim, "hidden_sizes": tuple(hidden_sizes), "activation": activation}
        width = self._policy_head_width(action_space=action_space)
        self.critic = mlp(**common, out_features=1, head_std=1.0)
        self.actor = mlp(**common, out_features=width, head_std=0.01)
        self._add_log_std(width=width)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(s), shape (B,)."""
        return self.critic(_flatten(obs)).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        """π(·|s): Categorical(logits) or Normal(mean, exp(log_std)) per action dimension."""
        out = self.actor(_flatten(obs))
        return distributions.policy(out=out, log_std=None if self.discrete else self.actor_logstd)


def _flatten(obs: torch.Tensor) -> torch.Tensor:
    return obs.reshape(obs.shape[0], -1).float()
