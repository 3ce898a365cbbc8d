"""``make_scaler``: the one place an actor-scaling config (nitro/config.py) becomes a scaler object.

It lives apart from the config sections because the scalers import torch (Nitro's probe), and reading a config must
not (``import nimbus.config`` loads no torch; tests/unit/test_architecture.py).

Example::

    scaler = make_scaler(config=config.actors.scaling)
    decision = scaler.initial()              # then scaler.decide(metrics=row) after every round
"""

from __future__ import annotations

from nimbus.nitro.baselines import FixedScaler, HydrozoaScaler, MaxScaler
from nimbus.nitro.config import (
    FixedScalingConfig,
    HydrozoaScalingConfig,
    MaxScalingConfig,
    NitroScalingConfig,
    ScalingConfig,
)
from nimbus.nitro.scaler import NitroScaler
from nimbus.nitro.scaler_authors import AuthorsCodeNitroScaler
from nimbus.types import ActorScaler


def make_scaler(*, config: ScalingConfig) -> ActorScaler:
    """The actor scaler a validated config describes."""
    if isinstance(config, FixedScalingConfig):
        return FixedScaler(num_actors=config.num_actors)
    if isinstance(config, NitroScalingConfig):
        nitro = AuthorsCodeNitroScaler if config.variant == "authors_code" else NitroScaler
        return nitro(
            min_actors=config.min_actors, max_actors=config.max_actors, window=config.window,
            decay=config.decay, budget_usd=config.budget_usd, on_budget=config.on_budget,
        )
    if isinstance(config, HydrozoaScalingConfig):
        return HydrozoaScaler(
            initial_actors=config.initial_actors, max_actors=config.max_actors,
            double_every_rounds=config.double_every_rounds,
        )
    if isinstance(config, MaxScalingConfig):
        return MaxScaler(max_actors=config.max_actors)
    raise TypeError(f"not a scaling config: {type(config).__name__}")
