"""DQN's model: the online Q-network, its frozen target copy, and ε and the gradient-step count as buffers.

ε and ``num_grad_steps`` are buffers so that they travel with the weights the learner broadcasts and the target-copy
cadence survives a learner restart. Its own module, below ``algorithm.py``, ``learner.py`` and ``loss.py``, which
all name it.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class DQNModel(nn.Module):
    """Online ``q``, its frozen copy ``q_target``, the exploration rate ``epsilon``, ``num_grad_steps``."""

    def __init__(self, *, q: nn.Module, epsilon: float) -> None:
        super().__init__()
        self.q = q
        self.q_target = copy.deepcopy(q).requires_grad_(False)
        self.register_buffer("epsilon", torch.tensor(float(epsilon)))
        self.register_buffer("num_grad_steps", torch.zeros((), dtype=torch.int64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs)
