"""Fixtures shared by the unit tests: a real ShmStore (the per-test shared-memory prefix is tests/conftest.py's)
and RoundMetrics rows built from the few fields a controller test cares about."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from nimbus.data.store import ShmStore
from nimbus.types import RoundMetrics


@pytest.fixture
def store():
    store = ShmStore(namespace=uuid.uuid4().hex[:8], owner=True)
    yield store
    store.close()


def round_metrics(*, round: int, cost_usd: float = 0.0, extras: dict[str, float] | None = None) -> RoundMetrics:
    return RoundMetrics(
        round=round, env_steps=1000 * (round + 1), episodes=round, return_mean=None, return_min=None,
        return_max=None, num_actors=8, num_learners=1, policy_version=round + 1, sampling_s=1.0,
        transfer_s=0.1, learning_s=0.5, round_s=1.6, wall_s=1.6 * (round + 1), cost_usd=cost_usd,
        extras=dict(extras or {}),
    )


@pytest.fixture
def make_metrics() -> Callable[..., RoundMetrics]:
    """``make_metrics(round=3, ratio=1.5, cost_usd=0.2, lambda_min=-0.1)``; ratio=None leaves the key out."""

    def make(
        *, round: int, ratio: float | None = None, cost_usd: float = 0.0, lambda_min: float | None = None
    ) -> RoundMetrics:
        extras: dict[str, float] = {}
        if ratio is not None:
            extras["hessian_ratio"] = ratio
        if lambda_min is not None:
            extras["hessian_lambda_min"] = lambda_min
        return round_metrics(round=round, cost_usd=cost_usd, extras=extras)

    return make
