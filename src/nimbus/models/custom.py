"""Your own torch network in place of nimbus's (``algo.model: mypkg.nets:MyNet``, PPO and DQN).

The contract, checked when the run is built (before any worker starts) by one forward pass on two
observations sampled from the env's observation space:

- constructor: ``MyNet(*, observation_space: gym.spaces.Box, action_space: gym.Space, **algo.model_kwargs)``,
  a ``torch.nn.Module``;
- PPO: ``forward(obs) -> (policy_out, value)`` with ``obs`` float32 of shape ``(B, *obs_shape)``;
  ``policy_out`` is ``(B, n)`` logits for ``Discrete(n)`` actions, or ``(B, d)`` Gaussian means for a
  ``Box((d,))`` action space (nimbus adds the state-independent log-std); ``value`` is ``(B,)`` or ``(B, 1)``;
- DQN: ``forward(obs) -> q_values`` of shape ``(B, n)`` for ``Discrete(n)`` actions.

Anything else is a ConfigError saying what does not fit. The network's parameters appear in the
checkpoint under ``net.<name>`` (PPO) or ``q.<name>`` (DQN).

Example::

    net = build_user_network(ref="mypkg.nets:MyPolicy", kwargs={}, spaces=spaces, algo="ppo")
    model = CustomPolicyValue(net=net, action_space=spaces.action)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import nn
from torch.distributions import Distribution

from nimbus.envs.custom import resolve
from nimbus.errors import ConfigError
from nimbus.models import distributions
from nimbus.models.mlp import PolicyValueModel

_KEY = "algo.model"


def build_user_network(*, ref: str, kwargs: dict[str, Any], spaces: Any, algo: str) -> nn.Module:
    """Construct ``ref`` for ``spaces`` and check its outputs on a sampled batch (``algo``: ppo or dqn)."""
    cls = resolve(ref=ref, key=_KEY)
    try:
        net = cls(observation_space=spaces.observation, action_space=spaces.action, **kwargs)
    except TypeError as err:
        raise ConfigError(f"{_KEY} {ref}: the constructor must accept keyword arguments observation_space, "
                          f"action_space (and algo.model_kwargs {sorted(kwargs)}): {err}") from err
    if not isinstance(net, nn.Module):
        raise ConfigError(f"{_KEY} {ref}: built a {type(net).__name__}, expected a torch.nn.Module")
    net.register_forward_pre_hook(_float_inputs)  # replay keeps the env's dtype (e.g. int64 one-hots, uint8 frames)
    obs = torch.as_tensor(_sample(space=spaces.observation, rows=2), dtype=torch.float32)
    with torch.no_grad():
        out = net(obs)
    if algo == "dqn":
        _check_shape(ref=ref, what="q_values", got=out, want=(2, _discrete_n(ref=ref, space=spaces.action)))
    else:
        _check_policy_value(ref=ref, out=out, action_space=spaces.action)
    return net


def _float_inputs(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The contract's float32 observations, whatever dtype the buffer stored them in."""
    return tuple(arg.float() if torch.is_tensor(arg) and not arg.is_floating_point() else arg for arg in args)


def _sample(*, space: gym.Space, rows: int) -> Any:
    import numpy as np

    return np.stack([space.sample() for _ in range(rows)]).astype(np.float32)


def _discrete_n(*, ref: str, space: gym.Space) -> int:
    if not isinstance(space, gym.spaces.Discrete):
        raise ConfigError(f"{_KEY} {ref}: DQN needs a Discrete action space, got {space}")
    return int(space.n)


def _check_policy_value(*, ref: str, out: Any, action_space: gym.Space) -> None:
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise ConfigError(f"{_KEY} {ref}: forward(obs) must return (policy_out, value) for PPO, "
                          f"got {_describe(out)}")
    if isinstance(action_space, gym.spaces.Discrete):
        width, what = int(action_space.n), "policy_out (logits)"
    elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        width, what = int(action_space.shape[0]), "policy_out (action means)"
    else:
        raise ConfigError(f"{_KEY} {ref}: PPO needs a Discrete or 1-D Box action space, got {action_space}")
    _check_shape(ref=ref, what=what, got=out[0], want=(2, width))
    value = out[1]
    if not torch.is_tensor(value) or tuple(value.shape) not in ((2,), (2, 1)):
        raise ConfigError(f"{_KEY} {ref}: value must have shape (B,) or (B, 1) = (2,) or (2, 1) for a batch of "
                          f"2 observations, got {_describe(value)}")


def _check_shape(*, ref: str, what: str, got: Any, want: tuple[int, ...]) -> None:
    if not torch.is_tensor(got) or tuple(got.shape) != want:
        raise ConfigError(f"{_KEY} {ref}: {what} must have shape (B, {want[1]}) = {want} for a batch of "
                          f"{want[0]} observations, got {_describe(got)}")
    if not got.dtype.is_floating_point:
        raise ConfigError(f"{_KEY} {ref}: {what} must be floating point, got {got.dtype}")


def _describe(value: Any) -> str:
    if torch.is_tensor(value):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}: ({', '.join(_describe(v) for v in value)})"
    return f"a {type(value).__name__}"


class CustomPolicyValue(PolicyValueModel):
    """A user network as PPO's policy-value model: one forward pass gives π(·|s) and V(s)."""

    def __init__(self, *, net: nn.Module, action_space: gym.Space) -> None:
        super().__init__()
        width = self._policy_head_width(action_space=action_space)
        self.net = net
        self._add_log_std(width=width)

    def _heads(self, obs: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        out, value = self.net(obs.float())
        dist = distributions.policy(out=out, log_std=None if self.discrete else self.actor_logstd)
        return dist, value.reshape(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self._heads(obs)[1]

    def distribution(self, obs: torch.Tensor) -> Distribution:
        return self._heads(obs)[0]

    def act(self, obs: torch.Tensor, *, explore: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist, value = self._heads(obs)
        action = dist.sample() if explore else distributions.mode(dist=dist)
        return action, distributions.log_prob(dist=dist, actions=action), value

    def evaluate(self, obs: torch.Tensor, *, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist, value = self._heads(obs)
        return distributions.log_prob(dist=dist, actions=actions), distributions.entropy(dist=dist), value
