"""The round's staleness metrics (issue 26, Metrics): histogram, min/mean/max, gradients per aggregation, refusals
by reason, β of the round, and learners in flight over the round, time-weighted (not a snapshot at its end)."""

from __future__ import annotations

import pytest

from nimbus.stellaris.round_stats import Batch, FlightMeter, round_extras, staleness_histogram


def _batch(*, started_s: float = 0.0, meter: FlightMeter | None = None) -> Batch:
    return Batch(round=None, key="batch/main/r0", tasks=[], outstanding=0, learning_started_s=started_s,
                 flight_integral_start=meter.integral(now_s=started_s) if meter else 0.0)


def test_the_histogram_has_fixed_bins_and_counts_every_gradient():
    histogram = staleness_histogram(staleness=[0, 0, 1, 3, 7, 8, 12])
    assert list(histogram) == [f"staleness/count_{d}" for d in range(8)] + ["staleness/count_8plus"]
    assert histogram["staleness/count_0"] == 2 and histogram["staleness/count_1"] == 1
    assert histogram["staleness/count_3"] == 1 and histogram["staleness/count_7"] == 1
    assert histogram["staleness/count_8plus"] == 2 and sum(histogram.values()) == 7
    assert sum(staleness_histogram(staleness=[]).values()) == 0


def test_learners_in_flight_are_averaged_over_the_round_not_read_at_its_end():
    """0 s-1 s: 3 in flight; 1 s-3 s: 1; 3 s-4 s: 0 → (3 + 2 + 0) / 4 = 1.25, max 3; a snapshot at the end says 0."""
    meter = FlightMeter(now_s=0.0)
    batch = _batch(meter=meter)
    meter.change(in_flight=3, now_s=0.0, open_batches=[batch])
    meter.change(in_flight=1, now_s=1.0, open_batches=[batch])
    meter.change(in_flight=0, now_s=3.0, open_batches=[batch])
    extras = round_extras(batch=batch, now_s=4.0, meter=meter, learners=2)
    assert extras["staleness/learners_in_flight_share"] == pytest.approx(1.25 / 2)
    assert extras["staleness/learners_in_flight_max"] == 3


def test_a_round_started_later_counts_only_its_own_span():
    meter = FlightMeter(now_s=0.0)
    meter.change(in_flight=4, now_s=0.0, open_batches=[])
    later = _batch(started_s=2.0, meter=meter)   # 4 in flight since 0 s: 8 learner-seconds before it started
    meter.change(in_flight=2, now_s=3.0, open_batches=[later])
    extras = round_extras(batch=later, now_s=4.0, meter=meter, learners=2)
    assert extras["staleness/learners_in_flight_share"] == pytest.approx((4 * 1 + 2 * 1) / 2 / 2)


def test_staleness_refusals_and_gradients_per_aggregation():
    batch = _batch()
    batch.staleness = [0, 1, 2, 5]
    batch.admitted, batch.refused, batch.refused_nonfinite, batch.refused_parameter = 3, 3, 1, 1
    batch.aggregations, batch.aggregated, batch.aggregation_share = 2, 4, 2.0   # two aggregations of two
    batch.threshold = 2.5
    extras = round_extras(batch=batch, now_s=1.0, meter=FlightMeter(now_s=0.0), learners=2)
    assert (extras["staleness/min"], extras["staleness/mean"], extras["staleness/max"]) == (0, 2, 5)
    assert extras["staleness/refused_rule"] == 1 and extras["staleness/rejected"] == 3
    assert extras["staleness/gradients_per_aggregation"] == 2
    assert extras["staleness/threshold"] == 2.5
