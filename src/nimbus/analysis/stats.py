"""Statistics across seeds, as RL results are reported (Agarwal et al. 2021, "Deep RL at the Edge of the
Statistical Precipice"; the rliable library): interquartile mean, stratified bootstrap intervals, probability of
improvement, performance profiles.

Scores come per task: ``scores_by_task[t]`` holds one number per run (seed) on task ``t`` (an env). A stratified
bootstrap resamples the runs of each task on their own and recomputes the statistic over all of them, which is
``scipy.stats.bootstrap`` with one sample per task (``paired=False``). Intervals are percentile intervals, as
rliable's. The interquartile mean is rliable's: ``scipy.stats.trim_mean(scores, 0.25)`` over every run of every
task (for 5 runs: the mean of the middle 3).

Example::

    interval = aggregate(scores_by_task=[np.array([410.0, 455.0, 500.0, 488.0, 302.0])], statistic="iqm")
    interval.point, interval.low, interval.high     # IQM and its 95 % interval
    better = probability_of_improvement(x_by_task=[arm_a], y_by_task=[arm_b])   # P(X > Y), with an interval
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

Statistic = Literal["mean", "median", "iqm"]
CONFIDENCE = 0.95
RESAMPLES = 5000


@dataclass(frozen=True)
class Interval:
    """A statistic and its bootstrap interval; ``low``/``high`` are None when fewer than two runs exist."""

    point: float
    low: float | None
    high: float | None


def iqm(*, scores: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Interquartile mean: the mean of the middle 50 % (rliable's definition, trim_mean with 25 % cut each end)."""
    return stats.trim_mean(scores, proportiontocut=0.25, axis=axis)


def _reducer(statistic: Statistic) -> Callable[..., np.ndarray]:
    if statistic == "mean":
        return lambda x, axis: np.mean(x, axis=axis)
    if statistic == "median":
        return lambda x, axis: np.median(x, axis=axis)
    return lambda x, axis: iqm(scores=x, axis=axis)


def _tasks(scores_by_task: Sequence[np.ndarray]) -> list[np.ndarray]:
    tasks = [np.asarray(s, dtype=np.float64).ravel() for s in scores_by_task]
    if not tasks or any(t.size == 0 for t in tasks):
        raise ValueError("every task needs at least one score")
    if any(not np.isfinite(t).all() for t in tasks):
        raise ValueError("scores must be finite")
    return tasks


def aggregate(*, scores_by_task: Sequence[np.ndarray], statistic: Statistic, confidence: float = CONFIDENCE,
              resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """``statistic`` over all runs of all tasks, with a stratified percentile bootstrap interval."""
    tasks = _tasks(scores_by_task)
    reduce = _reducer(statistic)
    point = float(reduce(np.concatenate(tasks), axis=None))
    if sum(t.size for t in tasks) < 2:
        return Interval(point=point, low=None, high=None)

    def pooled(*samples: np.ndarray, axis: int) -> np.ndarray:
        return reduce(np.concatenate(samples, axis=axis), axis=axis)

    result = stats.bootstrap(tuple(tasks), pooled, n_resamples=resamples, confidence_level=confidence,
                             method="percentile", paired=False, vectorized=True, axis=-1,
                             random_state=np.random.default_rng(seed))
    return Interval(point=point, low=float(result.confidence_interval.low),
                    high=float(result.confidence_interval.high))


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) on one task for batched samples x (..., m), y (..., n): ties count one half."""
    greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    ties = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
    return greater + 0.5 * ties


def probability_of_improvement(*, x_by_task: Sequence[np.ndarray], y_by_task: Sequence[np.ndarray],
                               confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                               seed: int = 0) -> Interval:
    """P(X > Y): the chance that a run of X beats a run of Y on a task, averaged over tasks (rliable)."""
    xs, ys = _tasks(x_by_task), _tasks(y_by_task)
    if len(xs) != len(ys):
        raise ValueError(f"X has {len(xs)} tasks and Y {len(ys)}: compare on the same tasks")
    point = float(np.mean([_improvement(x, y) for x, y in zip(xs, ys)]))
    if min(min(x.size for x in xs), min(y.size for y in ys)) < 2:
        return Interval(point=point, low=None, high=None)

    def statistic(*samples: np.ndarray, axis: int) -> np.ndarray:
        half = len(samples) // 2
        return np.mean([_improvement(x, y) for x, y in zip(samples[:half], samples[half:])], axis=0)

    result = stats.bootstrap((*xs, *ys), statistic, n_resamples=resamples, confidence_level=confidence,
                             method="percentile", paired=False, vectorized=True, axis=-1,
                             random_state=np.random.default_rng(seed))
    return Interval(point=point, low=float(result.confidence_interval.low),
                    high=float(result.confidence_interval.high))


def performance_profile(*, scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """The fraction of runs whose score exceeds each threshold (a run-score distribution, rliable)."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    return (scores[None, :] > np.asarray(thresholds, dtype=np.float64)[:, None]).mean(axis=1)


def band(*, runs_by_point: np.ndarray, statistic: Statistic = "iqm", confidence: float = CONFIDENCE,
         resamples: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A learning curve's statistic and percentile bootstrap band at each x: ``runs_by_point`` is (points, runs)."""
    values = np.asarray(runs_by_point, dtype=np.float64)
    reduce = _reducer(statistic)
    point = np.asarray(reduce(values, axis=-1), dtype=np.float64)
    if values.shape[-1] < 2:
        return point, point.copy(), point.copy()
    result = stats.bootstrap((values,), lambda x, axis: reduce(x, axis=axis), n_resamples=resamples,
                             confidence_level=confidence, method="percentile", vectorized=True, axis=-1,
                             random_state=np.random.default_rng(seed))
    return point, np.asarray(result.confidence_interval.low), np.asarray(result.confidence_interval.high)
