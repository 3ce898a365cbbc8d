"""SAC's model: the squashed Gaussian actor, twin critics and their Polyak target, learned log α, and the Box
bounds the actor's [-1, 1] actions map to.

Its own module, below ``algorithm.py``, ``learner.py`` and ``loss.py``, which all name it.
"""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from nimbus.algos.sac.config import SACConfig
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.qnet import SquashedGaussianActor, TwinQ


class SACModel(nn.Module):
    def __init__(self, *, spaces: EnvSpaces, config: SACConfig) -> None:
        super().__init__()
        action = spaces.action
        if not (isinstance(action, gym.spaces.Box) and len(action.shape) == 1 and action.is_bounded()):
            raise TypeError(f"SAC needs a bounded 1-D Box action space, got {action}")
        obs_dim = int(np.prod(spaces.observation.shape))
        action_dim = action.shape[0]
        self.actor = SquashedGaussianActor(obs_dim=obs_dim, action_dim=action_dim, hidden_sizes=config.hidden_sizes)
        self.critic = TwinQ(obs_dim=obs_dim, action_dim=action_dim, hidden_sizes=config.hidden_sizes)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config.init_alpha)),
                                      requires_grad=config.autotune_alpha)
        low, high = (torch.as_tensor(b, dtype=torch.float32) for b in (action.low, action.high))
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)
        self.target_entropy = float(-action_dim if config.target_entropy is None else config.target_entropy)
        self.register_buffer("num_grad_steps", torch.zeros((), dtype=torch.int64))

    def to_env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """[-1, 1] → the Box bounds."""
        return actions * self.action_scale + self.action_bias

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """The Box bounds → [-1, 1]."""
        return (actions.float() - self.action_bias) / self.action_scale
