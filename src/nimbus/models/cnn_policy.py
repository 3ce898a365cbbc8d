"""A CNN policy-value network for PPO on stacked frames (``algo.model: nimbus.models.cnn_policy:NatureCNNPolicyValue``).

The Nature DQN torso (models/qnet.py ``NatureCNN``: 3 convolutions and a 512-unit layer, uint8 frames scaled to
[0, 1]) shared by a policy head (logits, orthogonal init with std 0.01) and a value head (std 1), as SB3's
``CnnPolicy`` and CleanRL's ``ppo_atari`` build it. It follows models/custom.py's contract: ``forward(obs)`` returns
``(logits, value)``.

Example (config)::

    algo: {name: ppo, model: "nimbus.models.cnn_policy:NatureCNNPolicyValue"}
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn

from nimbus.models.mlp import layer_init
from nimbus.models.qnet import NatureCNN


class NatureCNNPolicyValue(nn.Module):
    def __init__(self, *, observation_space: gym.spaces.Box, action_space: gym.Space, features_dim: int = 512) -> None:
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete) or len(observation_space.shape) != 3:
            raise TypeError(f"NatureCNNPolicyValue takes stacked frames (3-d observations) and Discrete actions, "
                            f"got {observation_space} and {action_space}")
        self.torso = NatureCNN(obs_shape=tuple(observation_space.shape), features_dim=features_dim)
        self.policy = layer_init(nn.Linear(features_dim, int(action_space.n)), std=0.01)
        self.value = layer_init(nn.Linear(features_dim, 1), std=1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.torso(obs)
        return self.policy(features), self.value(features).squeeze(-1)
