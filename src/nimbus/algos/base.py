"""The Algorithm contract shared by the actor and learner functions.

An algorithm is math only: it builds a model for the env's spaces, acts (actor side), post-processes
a batch (GAE, V-trace, n-step targets), and computes a loss. Gradient computation, clipping and
application live in the generic learner code, so every aggregation rule works with every algorithm.

Example (what an actor function does)::

    algo = make_algorithm(config=cfg.algo)
    model = algo.make_model(spaces=spaces)
    step = algo.act(model=model, obs=torch.as_tensor(obs), explore=True)
    env.step(step.actions)        # step.extras (log-prob, value) go into the buffer with the step
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from nimbus.envs.spaces import EnvSpaces


@dataclass(frozen=True)
class KeySpec:
    """One per-step buffer column: shape of one step's value and its dtype."""

    shape: tuple[int, ...]
    dtype: str  # numpy dtype name, e.g. "float32"


@dataclass(frozen=True)
class ActOutput:
    """The actions to send to the env and the per-step extras the learner needs (numpy, batch-first)."""

    actions: np.ndarray
    extras: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class LossOutput:
    loss: torch.Tensor
    stats: dict[str, float]


class Algorithm(Protocol):
    name: str

    def make_model(self, *, spaces: EnvSpaces) -> torch.nn.Module: ...

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool) -> ActOutput: ...

    def buffer_spec(self, *, spaces: EnvSpaces) -> dict[str, KeySpec]: ...

    def postprocess(self, *, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...

    def loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> LossOutput: ...


A = TypeVar("A")


def build_by_name(*, config: Any, builders: Mapping[str, Callable[[Any], A]], configs: Mapping[str, type],
                  kind: str) -> A:
    """What ``builders[config.name]`` builds from ``config``: ValueError naming the known ones for an unknown
    ``kind`` ("algorithm", "multi-agent algorithm"), TypeError for a config that is not ``configs[name]``."""
    name = getattr(config, "name", None)
    if name not in builders:
        raise ValueError(f"unknown {kind} {name!r}; known: {sorted(builders)}")
    expected = configs[name]
    if not isinstance(config, expected):
        raise TypeError(f"algorithm {name!r} needs a {expected.__name__}, got {type(config).__name__}")
    return builders[name](config)
