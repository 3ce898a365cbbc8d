"""Networks for the off-policy family: Q-networks (MLP or Atari CNN torso), SAC's squashed Gaussian
actor and twin Q critics, and a CNN actor-critic with the interface of ``models.mlp.ActorCritic``
(for IMPALA / IMPACT, or PPO, on image observations).

Observations arrive as the env gives them: float vectors, or uint8 image stacks (84x84x4 as
``AtariPreprocessing`` + ``FrameStackObservation`` produce, channels first or last); ``make_torso``
picks the right torso from the observation space.

Example::

    torso, features = make_torso(observation_space=env.observation_space, hidden_sizes=(256, 256))
    q = QNetwork(observation_space=env.observation_space, num_actions=2, hidden_sizes=(256, 256))
    q_values = q(torch.as_tensor(obs))                                   # [B, num_actions]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Distribution

from nimbus.errors import ConfigError
from nimbus.models import distributions
from nimbus.models.mlp import Activation, ActorCritic, PolicyValueModel, layer_init

LOG_STD_MIN = -20.0  # SB3's bounds for SAC's log-std
LOG_STD_MAX = 2.0


def mlp(*, in_dim: int, hidden_sizes: Sequence[int], out_dim: int | None,
        activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """Linear-activation stack; ``out_dim=None`` ends on the last hidden activation (a torso)."""
    layers: list[nn.Module] = []
    last = in_dim
    for size in hidden_sizes:
        layers += [nn.Linear(last, size), activation()]
        last = size
    if out_dim is not None:
        layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


def is_image_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


class NatureCNN(nn.Module):
    """Mnih et al. 2015 torso: 3 convs + a 512-unit layer; uint8 frames are scaled to [0, 1]."""

    def __init__(self, *, obs_shape: tuple[int, int, int], features_dim: int = 512) -> None:
        super().__init__()
        # channels-last when the last axis is the short one (84x84x4), else channels-first (4x84x84)
        self.channels_last = obs_shape[-1] < obs_shape[0]
        channels = obs_shape[-1] if self.channels_last else obs_shape[0]
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, kernel_size=8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.convs(torch.zeros(1, *self._chw(obs_shape))).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flat, features_dim), nn.ReLU())
        self.features_dim = features_dim

    def _chw(self, shape: tuple[int, ...]) -> tuple[int, int, int]:
        return (shape[-1], shape[0], shape[1]) if self.channels_last else tuple(shape)  # type: ignore[return-value]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() / 255.0
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return self.linear(self.convs(x))


class FlattenMLP(nn.Module):
    """Flattens vector observations (any shape) and applies an MLP torso."""

    def __init__(self, *, obs_shape: tuple[int, ...], hidden_sizes: Sequence[int],
                 activation: type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        self.net = mlp(in_dim=int(np.prod(obs_shape)), hidden_sizes=hidden_sizes, out_dim=None,
                       activation=activation)
        self.features_dim = hidden_sizes[-1] if hidden_sizes else int(np.prod(obs_shape))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float().flatten(start_dim=1))


def make_torso(*, observation_space: gym.Space, hidden_sizes: Sequence[int],
               activation: type[nn.Module] = nn.ReLU) -> tuple[nn.Module, int]:
    """NatureCNN for uint8 image stacks, else a flattening MLP. Returns (torso, features_dim)."""
    if not isinstance(observation_space, gym.spaces.Box):
        raise TypeError(f"only Box observation spaces are supported, got {observation_space}")
    if is_image_space(observation_space):
        torso: nn.Module = NatureCNN(obs_shape=observation_space.shape)  # type: ignore[arg-type]
    else:
        torso = FlattenMLP(obs_shape=observation_space.shape, hidden_sizes=hidden_sizes, activation=activation)
    return torso, torso.features_dim  # type: ignore[return-value]


class CNNActorCritic(PolicyValueModel):
    """π(a|s) and V(s) over uint8 frame stacks: one shared NatureCNN torso, two linear heads.

    Same methods as ``ActorCritic`` (value, distribution, act, evaluate) and the same CleanRL
    initialisation of the heads (orthogonal, gain 0.01 for the policy, 1.0 for the value).
    """

    def __init__(self, *, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        if not is_image_space(observation_space):
            raise ConfigError(f"CNNActorCritic needs a uint8 image observation space, got {observation_space}")
        self.torso = NatureCNN(obs_shape=observation_space.shape)  # type: ignore[arg-type]
        width = self._policy_head_width(action_space=action_space)
        self.actor = layer_init(nn.Linear(self.torso.features_dim, width), std=0.01)
        self.critic = layer_init(nn.Linear(self.torso.features_dim, 1), std=1.0)
        self._add_log_std(width=width)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.torso(obs)).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        out = self.actor(self.torso(obs))
        return distributions.policy(out=out, log_std=None if self.discrete else self.actor_logstd)


def make_actor_critic(*, observation_space: gym.Space, action_space: gym.Space, hidden_sizes: tuple[int, ...],
                      activation: Activation) -> nn.Module:
    """CNNActorCritic for uint8 image stacks, else the MLP ``ActorCritic`` (hidden sizes apply to it)."""
    if is_image_space(observation_space):
        return CNNActorCritic(observation_space=observation_space, action_space=action_space)
    return ActorCritic(observation_space=observation_space, action_space=action_space, hidden_sizes=hidden_sizes,
                       activation=activation)


class QNetwork(nn.Module):
    """Q(s, ·) for a discrete action space: torso + linear head."""

    def __init__(self, *, observation_space: gym.Space, num_actions: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        self.torso, features = make_torso(observation_space=observation_space, hidden_sizes=hidden_sizes)
        self.head = nn.Linear(features, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(obs))


class SquashedGaussianActor(nn.Module):
    """SAC policy: a = tanh(u), u ~ N(μ(s), σ(s)); actions live in [-1, 1] (rescale outside).

    ``log_prob`` includes the tanh change of variables: log π(a|s) = log N(u) − Σ log(1 − tanh(u)²).
    """

    def __init__(self, *, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        self.trunk = mlp(in_dim=obs_dim, hidden_sizes=hidden_sizes, out_dim=None)
        last = hidden_sizes[-1] if hidden_sizes else obs_dim
        self.mean = nn.Linear(last, action_dim)
        self.log_std = nn.Linear(last, action_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs.float().flatten(start_dim=1))
        log_std = self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return self.mean(h), log_std

    def sample(self, obs: torch.Tensor, *, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(action in [-1, 1], log π(action|obs)) with the reparameterisation trick."""
        mean, log_std = self(obs)
        std = log_std.exp()
        u = mean if deterministic else mean + std * torch.randn_like(mean)
        action = torch.tanh(u)
        return action, squashed_gaussian_log_prob(u=u, mean=mean, log_std=log_std)


def squashed_gaussian_log_prob(*, u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log-density of tanh(u) where u ~ N(mean, exp(log_std)), summed over the action dims.

    Uses the stable identity log(1 − tanh(u)²) = 2·(log 2 − u − softplus(−2u)).
    """
    gauss = -0.5 * (((u - mean) / log_std.exp()) ** 2) - log_std - 0.5 * math.log(2 * math.pi)
    log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
    return (gauss - log_det).sum(dim=-1)


class ContinuousQ(nn.Module):
    """Q(s, a) for continuous actions: MLP over the concatenation [s, a]."""

    def __init__(self, *, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp(in_dim=obs_dim + action_dim, hidden_sizes=hidden_sizes, out_dim=1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs.float().flatten(start_dim=1), action.float()], dim=-1)).squeeze(-1)


class TwinQ(nn.Module):
    """Two independent critics (Fujimoto et al. 2018); SAC's targets use their minimum."""

    def __init__(self, *, obs_dim: int, action_dim: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        self.q1 = ContinuousQ(obs_dim=obs_dim, action_dim=action_dim, hidden_sizes=hidden_sizes)
        self.q2 = ContinuousQ(obs_dim=obs_dim, action_dim=action_dim, hidden_sizes=hidden_sizes)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q1(obs, action), self.q2(obs, action)


@torch.no_grad()
def polyak_update(*, source: nn.Module, target: nn.Module, tau: float) -> None:
    """target ← τ·source + (1 − τ)·target over parameters and buffers; τ = 1 is a hard copy."""
    sources, targets = list(source.parameters()), list(target.parameters())
    if len(sources) != len(targets):
        raise ValueError(f"polyak_update: {len(sources)} source and {len(targets)} target parameters")
    if tau < 1.0:
        torch._foreach_lerp_(targets, sources, tau)  # one multi-tensor op: small nets are overhead-bound
    else:
        torch._foreach_copy_(targets, sources)
    for s, t in zip(source.buffers(), target.buffers(), strict=True):
        t.copy_(s)
