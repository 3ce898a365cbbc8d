"""Statistics across seeds (analysis/stats.py) against direct computations: IQM, stratified percentile bootstrap
intervals, probability of improvement, performance profiles, curve bands."""

from __future__ import annotations

import numpy as np
import pytest

from nimbus.analysis.stats import aggregate, band, iqm, performance_profile, probability_of_improvement


def _direct_iqm(values: np.ndarray) -> float:
    """The mean of the middle half: drop floor(n/4) runs at each end of the sorted scores."""
    ordered, cut = np.sort(values), len(values) // 4
    return float(ordered[cut:len(ordered) - cut].mean())


def _direct_bootstrap(tasks: list[np.ndarray], statistic, *, stratified: bool, resamples: int = 20000,
                      seed: int = 7) -> tuple[float, float]:
    """A percentile interval by explicit resampling: each task's runs on their own, or all runs pooled."""
    rng = np.random.default_rng(seed)
    pooled = np.concatenate(tasks)
    draws = []
    for _ in range(resamples):
        if stratified:
            sample = np.concatenate([t[rng.integers(0, t.size, t.size)] for t in tasks])
        else:
            sample = pooled[rng.integers(0, pooled.size, pooled.size)]
        draws.append(statistic(sample))
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


@pytest.mark.parametrize("values", [[410.0, 455.0, 500.0, 488.0, 302.0], [1.0, 50.0, 2.0, 12.0, 3.0, 100.0, 10.0, 11.0],
                                    [5.0, 1.0, 100.0]])
def test_iqm_is_the_mean_of_the_middle_half(values: list[float]) -> None:
    assert iqm(scores=np.asarray(values)) == pytest.approx(_direct_iqm(np.asarray(values)))


def test_the_iqm_of_five_runs_ignores_the_best_and_the_worst() -> None:
    interval = aggregate(scores_by_task=[np.array([410.0, 455.0, 500.0, 488.0, 302.0])], statistic="iqm")
    assert interval.point == pytest.approx((410.0 + 455.0 + 488.0) / 3)


def test_the_interval_resamples_each_task_on_its_own() -> None:
    """Two tasks of very different scale and size: resampling the pool mixes their runs and widens the interval;
    the stratified interval matches an explicit stratified resampling."""
    tasks = [np.array([0.0, 1.0]), np.array([100.0, 102.0, 104.0, 106.0, 108.0, 110.0, 112.0, 114.0])]
    interval = aggregate(scores_by_task=tasks, statistic="iqm", resamples=20000)
    low, high = _direct_bootstrap(tasks, _direct_iqm, stratified=True)
    pooled_low, pooled_high = _direct_bootstrap(tasks, _direct_iqm, stratified=False)
    assert interval.point == pytest.approx(_direct_iqm(np.concatenate(tasks)))
    assert interval.low == pytest.approx(low, abs=1.5) and interval.high == pytest.approx(high, abs=1.5)
    assert (high - low) + 10 < pooled_high - pooled_low   # the check tells the two apart


@pytest.mark.parametrize("statistic,direct", [("mean", np.mean), ("median", np.median)])
def test_mean_and_median_intervals_match_direct_resampling(statistic: str, direct) -> None:
    scores = np.array([12.0, 15.0, 9.0, 30.0, 22.0, 18.0, 11.0])
    interval = aggregate(scores_by_task=[scores], statistic=statistic, resamples=20000)
    low, high = _direct_bootstrap([scores], direct, stratified=True)
    assert interval.point == pytest.approx(float(direct(scores)))
    assert interval.low == pytest.approx(low, abs=0.6) and interval.high == pytest.approx(high, abs=0.6)


def test_one_run_has_no_interval() -> None:
    interval = aggregate(scores_by_task=[np.array([3.0])], statistic="iqm")
    assert (interval.point, interval.low, interval.high) == (3.0, None, None)


def test_probability_of_improvement_counts_ties_as_half() -> None:
    x, y = np.array([3.0, 4.0, 5.0, 6.0, 7.0]), np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    wins = sum(a > b for a in x for b in y) + 0.5 * sum(a == b for a in x for b in y)
    interval = probability_of_improvement(x_by_task=[x], y_by_task=[y], resamples=20000)
    assert interval.point == pytest.approx(wins / 25) == pytest.approx(0.82)
    rng, draws = np.random.default_rng(3), []
    for _ in range(20000):
        xs, ys = x[rng.integers(0, 5, 5)], y[rng.integers(0, 5, 5)]
        draws.append(np.mean(xs[:, None] > ys[None, :]) + 0.5 * np.mean(xs[:, None] == ys[None, :]))
    assert interval.low == pytest.approx(np.percentile(draws, 2.5), abs=0.03)
    assert interval.high == pytest.approx(np.percentile(draws, 97.5), abs=0.03)


def test_probability_of_improvement_averages_over_tasks() -> None:
    """X wins every pair on one task and loses every pair on the other: 0.5, not a pooled count."""
    interval = probability_of_improvement(x_by_task=[np.array([10.0, 11.0]), np.array([0.0, 1.0, 2.0])],
                                          y_by_task=[np.array([1.0, 2.0]), np.array([50.0, 60.0])])
    assert interval.point == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement(x_by_task=[np.array([1.0, 2.0])], y_by_task=[np.array([1.0]), np.array([2.0])])


def test_performance_profile_is_the_fraction_of_runs_above_each_threshold() -> None:
    profile = performance_profile(scores=np.array([1.0, 2.0, 3.0, 4.0]), thresholds=np.array([0.0, 1.0, 2.5, 4.0]))
    assert list(profile) == [1.0, 0.75, 0.5, 0.0]


def test_a_curve_band_is_the_iqm_at_each_point_with_its_interval() -> None:
    runs_by_point = np.array([[1.0, 2.0, 3.0, 4.0, 50.0], [2.0, 2.0, 2.0, 2.0, 2.0]])
    point, low, high = band(runs_by_point=runs_by_point, resamples=2000)
    assert list(point) == pytest.approx([3.0, 2.0])
    assert low[1] == high[1] == 2.0 and low[0] < 3.0 < high[0]


@pytest.mark.parametrize("bad,match", [([np.array([])], "at least one"), ([np.array([1.0, np.nan])], "finite")])
def test_bad_scores_are_refused(bad: list[np.ndarray], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        aggregate(scores_by_task=bad, statistic="iqm")
