"""Fixed, Hydrozoa and Max scalers."""

from __future__ import annotations

import pytest

from nimbus.nitro.baselines import FixedScaler, HydrozoaScaler, MaxScaler


def test_hydrozoa_doubles_every_k_rounds_up_to_the_cap(make_metrics) -> None:
    scaler = HydrozoaScaler(initial_actors=8, max_actors=64, double_every_rounds=10)
    assert scaler.initial().num_actors == 8
    # decide(round r) returns the count for round r + 1
    counts = {r + 1: scaler.decide(metrics=make_metrics(round=r)).num_actors for r in range(0, 45)}
    assert counts[9] == 8 and counts[10] == 16 and counts[19] == 16 and counts[20] == 32
    assert counts[30] == 64 and counts[40] == 64 and counts[45] == 64


def test_hydrozoa_caps_a_count_that_is_not_a_power_of_two_multiple() -> None:
    scaler = HydrozoaScaler(initial_actors=3, max_actors=20, double_every_rounds=1)
    assert [scaler.actors_at(round_index=r) for r in range(5)] == [3, 6, 12, 20, 20]
    assert scaler.actors_at(round_index=10**9) == 20


@pytest.mark.parametrize(
    "kwargs",
    [dict(initial_actors=0, max_actors=4, double_every_rounds=1),
     dict(initial_actors=8, max_actors=4, double_every_rounds=1),
     dict(initial_actors=1, max_actors=4, double_every_rounds=0)],
)
def test_hydrozoa_rejects_bad_arguments(kwargs) -> None:
    with pytest.raises(ValueError):
        HydrozoaScaler(**kwargs)


def test_max_and_fixed_never_change(make_metrics) -> None:
    maximum, fixed = MaxScaler(max_actors=64), FixedScaler(num_actors=5)
    assert maximum.initial().num_actors == 64 and fixed.initial().num_actors == 5
    for r in range(3):
        assert maximum.decide(metrics=make_metrics(round=r, cost_usd=1e6)).num_actors == 64
        assert fixed.decide(metrics=make_metrics(round=r)).num_actors == 5
    with pytest.raises(ValueError):
        MaxScaler(max_actors=0)
