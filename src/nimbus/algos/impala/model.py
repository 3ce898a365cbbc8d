"""IMPALA's model: the actor-critic, IMPACT's frozen target copy, and the gradient-step count as a buffer.

``num_grad_steps`` is a buffer so that the target-refresh cadence survives a learner restart and travels with
checkpoints. Its own module, below ``algorithm.py``, ``learner.py`` and ``loss.py``, which all name it.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class ImpalaModel(nn.Module):
    """``net`` (actor-critic), IMPACT's frozen ``target_net`` (None for IMPALA), ``num_grad_steps``."""

    def __init__(self, *, net: nn.Module, with_target: bool) -> None:
        super().__init__()
        self.net = net
        self.target_net: nn.Module | None = copy.deepcopy(net).requires_grad_(False) if with_target else None
        self.register_buffer("num_grad_steps", torch.zeros((), dtype=torch.int64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net.value(obs)
