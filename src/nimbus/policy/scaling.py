"""The actor scaler a policy runs, found by ``actors.scaling.kind``, and what a scaler with state promises.

Each kind of the scaling section (nitro/config.py ``ScalingConfig``) names ``module:factory``, a function
``factory(*, config) -> ActorScaler`` imported when a run makes that scaler (the ``run/registry.py`` pattern). The
scalers are Nitro's (its paper's and the baselines it is measured against, nitro/scalers.py), while the per-policy
plumbing that makes one (policy/build.py) sits below the technique folders: a name resolved at build time keeps
that layer free of Nitro's imports, torch's probe among them, without a second place that knows the kinds.

A scaler that keeps state across rounds (Nitro's window of R values, its skipped probes, its budget flag) is a
``StatefulScaler``: ``train.checkpoint_replay`` saves that state beside each checkpoint and a resume puts it back
(policy/replay_checkpoint.py). The baselines keep none and are not.

Example::

    scaler = make_scaler(config=config.actors.scaling)   # kind: nitro -> nitro/scalers.py nitro_scaler
    decision = scaler.initial()                          # then scaler.decide(metrics=row) after every round
    isinstance(scaler, StatefulScaler)                   # True for Nitro's scalers
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from nimbus.core import ActorScaler
from nimbus.nitro.config import ScalingConfig

SCALERS: dict[str, str] = {
    "fixed": "nimbus.nitro.scalers:fixed_scaler",
    "nitro": "nimbus.nitro.scalers:nitro_scaler",
    "hydrozoa": "nimbus.nitro.scalers:hydrozoa_scaler",
    "max": "nimbus.nitro.scalers:max_scaler",
}
"""Every ``actors.scaling.kind``'s scaler factory, as ``module:function``."""


def make_scaler(*, config: ScalingConfig) -> ActorScaler:
    """The actor scaler a validated ``actors.scaling`` section describes (its factory imported now)."""
    module, _, name = SCALERS[config.kind].partition(":")
    factory: Callable[..., ActorScaler] = getattr(importlib.import_module(module), name)
    return factory(config=config)


@runtime_checkable
class StatefulScaler(Protocol):
    """An actor scaler whose decisions depend on rounds before (Nitro's window): its state as arrays, so a checkpoint
    stores it as safetensors, and back.

    Example::

        state = scaler.state_dict()         # {"window": array([...]), "counters": array([...])}
        scaler.load_state_dict(state)
    """

    def state_dict(self) -> dict[str, np.ndarray]: ...

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None: ...
