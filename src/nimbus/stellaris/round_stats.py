"""What the ``stellaris`` workflow counts per round (one batch) and the round's ``staleness/*`` metrics.

A round's row (docs/stellaris.md, "Metrics") carries, over the gradients computed on its batch:

    staleness/min, /mean, /max           staleness of the gradients the rule saw (applied or refused)
    staleness/count_0 … /count_7,        how many of them had staleness 0 … 7, and 8 or more (a histogram
      /count_8plus                        with fixed bins, so every row has the same keys)
    staleness/threshold                  β of the round (the rule's threshold when its batch started; NaN
                                          before δmax is measured and for rules without one)
    staleness/admitted, /rejected        gradients applied; gradients refused (all reasons), of which
    staleness/refused_nonfinite,          non-finite at the learner, refused by the parameter function
      /refused_parameter, /refused_rule    (non-finite, wrong shape), refused by the rule (P7, sync)
    staleness/aggregations               parameter invocations for its gradients
    staleness/gradients_per_aggregation  gradients per aggregation, mean over the aggregations its gradients
                                          were in (each weighted by its share of them)
    staleness/learners_invoked           learner functions launched on its batch (slices × passes: follows its rows)
    staleness/learners_early             of them, launched before its round's last actor delivered
    staleness/slices, /rows_sliced       slices cut from its rows (stellaris/slices.py), and their rows
    staleness/learners_in_flight_share   learners in flight, time-weighted mean over the round (from its batch
                                          taken to its row) over ``stellaris.learners``, not a snapshot (a
                                          timing: ``_share``); /learners_in_flight_max the most at once

Example::

    meter = FlightMeter(now_s=0.0)
    batch = Batch(round=state, key="batch/main/r0", tasks=tasks, outstanding=16, learning_started_s=0.0,
                  flight_integral_start=meter.integral(now_s=0.0))
    meter.change(in_flight=3, now_s=0.5, open_batches=[batch])
    extras = round_extras(batch=batch, now_s=2.0, meter=meter, learners=3)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nimbus.onpolicy.actor_round import RoundState

HISTOGRAM_BINS = 8   # staleness/count_0 … count_7, then count_8plus


class FlightMeter:
    """Learners in flight over time: the integral of their count (learner-seconds) and the count now."""

    def __init__(self, *, now_s: float) -> None:
        self.in_flight = 0
        self._integral = 0.0
        self._changed_s = now_s

    def integral(self, *, now_s: float) -> float:
        return self._integral + self.in_flight * (now_s - self._changed_s)

    def change(self, *, in_flight: int, now_s: float, open_batches: Iterable[Batch]) -> None:
        self._integral = self.integral(now_s=now_s)
        self.in_flight, self._changed_s = in_flight, now_s
        for batch in open_batches:
            batch.max_in_flight = max(batch.max_in_flight, in_flight)


@dataclass
class Batch:
    """One round's batch while its gradients are computed and aggregated."""

    round: RoundState               # its round's actors and counters (onpolicy/actor_round.py)
    key: str                        # the prefix of its slices' Store keys (``<key>/s<i>``)
    tasks: list[Any]                # (pass, slice index, slices.Slice) not launched yet, in that order
    outstanding: int                # gradients launched or to launch and not yet settled
    learning_started_s: float
    flight_integral_start: float = 0.0
    threshold: float | None = None  # β of this round (the rule's, when the batch started)
    stats: list[dict[str, float]] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    admitted: int = 0
    refused: int = 0
    refused_nonfinite: int = 0
    refused_parameter: int = 0
    aggregations: int = 0
    aggregated: int = 0             # its gradients that were in an aggregation (applied or refused by the parameter)
    aggregation_share: float = 0.0  # Σ over them of 1 / their aggregation's size (an aggregation may span rounds)
    learners_invoked: int = 0
    max_in_flight: int = 0
    parameter_s: float = 0.0
    compute_s: float = 0.0
    recomputed: int = 0             # gradients the parameter function recomputed with their co-members' truncation
    slice_keys: list[str] = field(default_factory=list)
    complete: bool = False          # every actor of its round delivered (no slice will be added)
    rows: int = 0                   # rows cut into its slices
    learners_early: int = 0         # learners launched before its round's last actor delivered

    def lost(self) -> None:
        """A gradient non-finite at its learner: refused before the rule saw it (no staleness)."""
        self.refused += 1
        self.refused_nonfinite += 1
        self.outstanding -= 1

    def refused_by_rule(self, *, staleness: int) -> None:
        """A gradient the rule refused (P7, sync): the rule saw it, so its staleness counts."""
        self.refused += 1
        self.staleness.append(staleness)
        self.outstanding -= 1

    def aggregated_member(self, *, staleness: int, size: int, refused: bool) -> None:
        """A gradient in an aggregation of ``size`` members, applied or (``refused``) refused by the parameter
        function; its share of the aggregation feeds ``gradients_per_aggregation``."""
        self.outstanding -= 1
        self.staleness.append(staleness)
        self.aggregated += 1
        self.aggregation_share += 1.0 / size
        if refused:
            self.refused += 1
            self.refused_parameter += 1
        else:
            self.admitted += 1


def staleness_histogram(*, staleness: list[int]) -> dict[str, float]:
    counts = np.bincount(np.minimum(np.asarray(staleness, dtype=np.int64), HISTOGRAM_BINS),
                         minlength=HISTOGRAM_BINS + 1) if staleness else np.zeros(HISTOGRAM_BINS + 1, np.int64)
    histogram = {f"staleness/count_{delta}": float(counts[delta]) for delta in range(HISTOGRAM_BINS)}
    histogram[f"staleness/count_{HISTOGRAM_BINS}plus"] = float(counts[HISTOGRAM_BINS])
    return histogram


def round_extras(*, batch: Batch, now_s: float, meter: FlightMeter, learners: int) -> dict[str, float]:
    """The round's ``staleness/*`` metrics (module docstring)."""
    staleness = batch.staleness or [0]
    span_s = max(now_s - batch.learning_started_s, 1e-9)
    in_flight = (meter.integral(now_s=now_s) - batch.flight_integral_start) / span_s
    return {"staleness/min": float(np.min(staleness)), "staleness/mean": float(np.mean(staleness)),
            "staleness/max": float(np.max(staleness)), **staleness_histogram(staleness=batch.staleness),
            "staleness/threshold": float("nan") if batch.threshold is None else float(batch.threshold),
            "staleness/admitted": float(batch.admitted), "staleness/rejected": float(batch.refused),
            "staleness/refused_nonfinite": float(batch.refused_nonfinite),
            "staleness/refused_parameter": float(batch.refused_parameter),
            "staleness/refused_rule": float(batch.refused - batch.refused_nonfinite - batch.refused_parameter),
            "staleness/aggregations": float(batch.aggregations),
            "staleness/gradients_per_aggregation": batch.aggregated / batch.aggregation_share
            if batch.aggregation_share else 0.0,
            "staleness/learners_invoked": float(batch.learners_invoked),
            "staleness/learners_early": float(batch.learners_early), "staleness/slices": float(len(batch.slice_keys)),
            "staleness/rows_sliced": float(batch.rows),
            "staleness/learners_in_flight_share": float(in_flight) / learners,
            "staleness/learners_in_flight_max": float(batch.max_in_flight),
            "staleness/truncated_fraction": float(np.mean([s.get("truncated_fraction", 0.0)
                                                           for s in batch.stats] or [0.0])),
            "staleness/parameter_s": batch.parameter_s, "staleness/recomputed": float(batch.recomputed)}


def mean_stats(*, stats: list[dict[str, float]]) -> dict[str, float]:
    """Each loss statistic's mean over the gradients that reported it (the round row's ``losses``)."""
    if not stats:
        return {}
    keys = set().union(*stats)
    return {key: float(np.mean([s[key] for s in stats if key in s])) for key in sorted(keys)}
