"""One factory per ``actors.scaling.kind`` (nitro/config.py): the scaler a validated section describes.

policy/scaling.py's ``SCALERS`` names each as ``module:factory`` and calls it, so the per-policy layer, below the
technique folders, makes a scaler without importing Nitro. They live apart from the config sections because the
scalers import torch (Nitro's probe), and reading a config must not (``import nimbus.config`` loads no torch;
tests/unit/test_architecture.py).

Example::

    scaler = nitro_scaler(config=NitroScalingConfig(min_actors=8, max_actors=64))
    decision = scaler.initial()              # then scaler.decide(metrics=row) after every round
"""

from __future__ import annotations

from nimbus.nitro.baselines import FixedScaler, HydrozoaScaler, MaxScaler
from nimbus.nitro.config import FixedScalingConfig, HydrozoaScalingConfig, MaxScalingConfig, NitroScalingConfig
from nimbus.nitro.scaler import NitroScaler, WindowedScaler
from nimbus.nitro.scaler_authors import AuthorsCodeNitroScaler


def fixed_scaler(*, config: FixedScalingConfig) -> FixedScaler:
    """``kind: fixed``: the same actor count every round."""
    return FixedScaler(num_actors=config.num_actors)


def nitro_scaler(*, config: NitroScalingConfig) -> WindowedScaler:
    """``kind: nitro``: the paper's scaler, or the authors' code's (``variant: authors_code``)."""
    nitro = AuthorsCodeNitroScaler if config.variant == "authors_code" else NitroScaler
    return nitro(
        min_actors=config.min_actors, max_actors=config.max_actors, window=config.window,
        decay=config.decay, budget_usd=config.budget_usd, on_budget=config.on_budget,
    )


def hydrozoa_scaler(*, config: HydrozoaScalingConfig) -> HydrozoaScaler:
    """``kind: hydrozoa``: double the actors every ``double_every_rounds`` rounds."""
    return HydrozoaScaler(
        initial_actors=config.initial_actors, max_actors=config.max_actors,
        double_every_rounds=config.double_every_rounds,
    )


def max_scaler(*, config: MaxScalingConfig) -> MaxScaler:
    """``kind: max``: always ``max_actors``."""
    return MaxScaler(max_actors=config.max_actors)
