"""Population-based training's arithmetic (Jaderberg et al. 2017; XingTian 5.1): rank, exploit, explore.

Pure functions over scores and hyperparameters, seeded by the caller's generator; the population runner
(pbt/population.py) applies them to the Store and the members' configs.

Example::

    rng = np.random.default_rng(0)
    source = exploit_source(member="m3", scores={"m0": 9.0, "m1": 5.0, "m2": 7.0, "m3": 1.0}, fraction=0.25, rng=rng)
    # "m0": the bottom quarter (m3) copies a member of the top quarter
    new = explore(values={"lr": 1e-3}, space=pbt.hyperparameters, factors=(0.8, 1.2), resample_probability=0.25,
                  rng=rng)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from nimbus.pbt.config import MutationConfig


def ranked(*, scores: Mapping[str, float]) -> list[str]:
    """Members best first (ties: by name, so the order does not depend on arrival)."""
    return sorted(scores, key=lambda name: (-scores[name], name))


def quantile_size(*, members: int, fraction: float) -> int:
    """How many members the top and the bottom fraction hold: floor(P·fraction), at least 1."""
    return max(1, int(math.floor(members * fraction)))


def exploit_source(*, member: str, scores: Mapping[str, float], fraction: float,
                   rng: np.random.Generator) -> str | None:
    """The top member ``member`` copies when it is in the bottom fraction (drawn uniformly from the top
    fraction), else None."""
    order = ranked(scores=scores)
    size = quantile_size(members=len(order), fraction=fraction)
    if member not in order[-size:]:
        return None
    top = order[:size]
    return top[int(rng.integers(len(top)))]


def sample(*, mutation: MutationConfig, rng: np.random.Generator) -> float:
    """A fresh draw from the key's range (log-uniform when ``log``)."""
    if mutation.log:
        return float(math.exp(rng.uniform(math.log(mutation.low), math.log(mutation.high))))
    return float(rng.uniform(mutation.low, mutation.high))


def explore(*, values: Mapping[str, Any], space: Mapping[str, MutationConfig], factors: tuple[float, float],
            resample_probability: float, rng: np.random.Generator) -> dict[str, Any]:
    """Each key: with ``resample_probability`` a fresh draw, else × one of ``factors``; clipped into
    [low, high]; integer keys stay integers (rounded)."""
    out: dict[str, Any] = {}
    for key in sorted(space):
        mutation, value = space[key], values[key]
        if rng.random() < resample_probability:
            new = sample(mutation=mutation, rng=rng)
        else:
            new = float(value) * factors[int(rng.integers(2))]
        new = min(max(new, mutation.low), mutation.high)
        out[key] = int(round(new)) if isinstance(value, int) and not isinstance(value, bool) else new
    return out


def initial_values(*, space: Mapping[str, MutationConfig], members: int, seed: int) -> list[dict[str, float]]:
    """Each member's first hyperparameters, drawn from the ranges with ``seed``."""
    rng = np.random.default_rng(seed)
    return [{key: sample(mutation=space[key], rng=rng) for key in sorted(space)} for _ in range(members)]
