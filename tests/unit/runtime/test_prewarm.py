"""ARTOS's workload monitor and pre-warm trigger (runtime/prewarm.py) on hand-made sequences."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nimbus.runtime.prewarm import (
    PrewarmController,
    WorkloadMonitor,
    actor_start_samples,
    actors_to_warm,
    fire_delay_s,
    is_stable,
    prewarm_threshold_s,
)

STARTS = [1.0, 1.1, 0.9, 1.0, 1.0]
FINS = [4.0, 4.1, 4.0, 3.9, 4.0]


def _fed(*, starts: list[float], fins: list[float]) -> WorkloadMonitor:
    monitor = WorkloadMonitor(window=5, stability=0.2)
    for start, fin in zip(starts, fins):
        monitor.observe(workload="w", actor_start_s=start, learner_fin_s=fin)
    return monitor


def test_stable_needs_a_full_window_whose_range_is_below_lambda_times_mean() -> None:
    assert not is_stable(values=[4.0] * 4, window=5, stability=0.2)
    assert is_stable(values=FINS, window=5, stability=0.2)
    assert not is_stable(values=[4.0, 4.0, 4.0, 4.0, 5.0], window=5, stability=0.2)  # range 1.0 ≥ 0.2 · 4.2
    assert is_stable(values=[4.0, 4.0, 4.0, 4.0, 4.8], window=5, stability=0.2)      # range 0.8 < 0.2 · 4.16


def test_threshold_is_min_fin_minus_max_start_minus_the_range_of_intervals() -> None:
    # intervals 3.0, 3.0, 3.1, 2.9, 3.0 → Δ_interval 0.2; 3.9 − 1.1 − 0.2
    assert prewarm_threshold_s(actor_starts=STARTS, learner_fins=FINS) == pytest.approx(2.6)
    assert prewarm_threshold_s(actor_starts=[3.0], learner_fins=[2.0, 2.0]) == 0.0  # start-up longer: at once


def test_monitor_sets_a_threshold_only_when_stable_and_forgets_old_rounds() -> None:
    assert _fed(starts=STARTS[:4], fins=FINS[:4]).threshold_s(workload="w") is None       # window not full
    assert _fed(starts=STARTS, fins=FINS).threshold_s(workload="w") == pytest.approx(2.6)
    assert _fed(starts=STARTS, fins=FINS).threshold_s(workload="other") is None
    unstable = _fed(starts=STARTS, fins=[4.0, 4.0, 8.0, 4.0, 4.0])
    assert not unstable.stable(workload="w") and unstable.threshold_s(workload="w") is None
    for fin in [4.5] * 4:  # four more rounds slide the 8.0 out: the window is [4.0, 4.5, 4.5, 4.5, 4.5]
        unstable.observe(workload="w", learner_fin_s=fin)
    assert unstable.stable(workload="w")
    # starts unchanged (no actor started in those rounds); newest paired: 4.5−1.0, 4.5−1.0, 4.5−0.9, 4.5−1.1, 4.0−1.0
    assert unstable.threshold_s(workload="w") == pytest.approx(4.0 - 1.1 - (3.6 - 3.0))
    no_starts = WorkloadMonitor(window=2)
    no_starts.observe(workload="w", learner_fin_s=1.0)
    no_starts.observe(workload="w", learner_fin_s=1.0)
    assert no_starts.stable(workload="w") and no_starts.threshold_s(workload="w") is None  # nothing to hide


def test_actors_to_warm_counts_the_workers_keep_alive_will_have_reclaimed() -> None:
    assert actors_to_warm(num_actors=4, actor_done_s=[0.0, 0.0, 1.0, 5.0], keep_alive_s=2.0, next_start_s=4.0) == 3
    assert actors_to_warm(num_actors=4, actor_done_s=[0.0, 0.0], keep_alive_s=10.0, next_start_s=4.0) == 0
    assert actors_to_warm(num_actors=1, actor_done_s=[0.0, 0.0], keep_alive_s=1.0, next_start_s=4.0) == 1


def _record(**kw):
    base = dict(function="actor", outcome="ok", cold=False, error_type=None, queued_at=10.0, start_at=10.1,
                end_at=11.0)
    return SimpleNamespace(**{**base, **kw})


def test_actor_start_samples_are_prewarms_and_cold_attempts_of_the_actor_only() -> None:
    records = [_record(), _record(cold=True, start_at=12.5), _record(outcome="prewarm", end_at=13.0),
               _record(function="learner", cold=True), _record(outcome="prewarm", error_type="ImportError"),
               _record(outcome="prewarm", provisioned=True, end_at=60.0)]   # a provisioned stretch: no start-up
    assert actor_start_samples(records=records, function="actor") == pytest.approx([2.5, 3.0])


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_controller_arms_its_trigger_at_the_threshold_and_prewarms_the_reclaimed_actors() -> None:
    clock, warmed = _Clock(), []
    rows = [_record(outcome="prewarm", queued_at=0.0, end_at=1.0)]  # one start-up sample of 1 s per round
    controller = PrewarmController(workload="w", actor_function="actor", monitor=WorkloadMonitor(), keep_alive_s=1.0,
                                   prewarm=warmed.append, records_since=lambda start: rows, clock=clock)
    for _ in range(5):  # five rounds: actors done 0.5 s in, learner finishes 4 s in
        controller.round_started(num_actors=2)
        assert controller._timer is None  # not stable yet
        clock.now += 0.5
        controller.actor_finished()
        controller.actor_finished()
        clock.now += 3.5
        controller.round_finished()
    controller.round_started(num_actors=2)
    timer = controller._timer
    assert timer is not None and timer.interval == pytest.approx(4.0 - 1.0 - 0.0)
    clock.now += 0.5
    controller.actor_finished()
    controller.actor_finished()
    timer.cancel()  # fire by hand instead of waiting for it
    controller.fire()
    assert warmed == [2] and controller.fired == 1  # both idle since 0.5 s in: reclaimed by 4 s in (keep-alive 1 s)
    controller.round_finished()
    assert controller._timer is None


def test_a_stale_slow_start_up_does_not_fire_the_trigger_so_early_that_keep_alive_reclaims_the_warm_worker() -> None:
    monitor = _fed(starts=[2.1] + [0.02] * 4, fins=[1.0] * 5)   # the first start-up imported everything
    controller = PrewarmController(workload="w", actor_function="actor", monitor=monitor, keep_alive_s=0.3,
                                   prewarm=lambda n: None, records_since=lambda start: [], clock=_Clock())
    assert monitor.threshold_s(workload="w") == 0.0
    controller.round_started(num_actors=2)
    assert controller._timer.interval == pytest.approx(1.0 - 0.02 - 0.15)   # ready 0.15 s before it is needed
    controller.close()
    assert fire_delay_s(threshold_s=2.6, actor_starts=[1.0], learner_fins=[4.0], keep_alive_s=600.0) == 2.6


def test_a_trigger_that_fires_while_actors_run_acts_when_the_last_one_finishes() -> None:
    clock, warmed = _Clock(), []
    monitor = _fed(starts=[1.0] * 5, fins=[4.0] * 5)
    controller = PrewarmController(workload="w", actor_function="actor", monitor=monitor, keep_alive_s=1.0,
                                   prewarm=warmed.append, records_since=lambda start: [], clock=clock)
    controller.round_started(num_actors=2)
    controller._timer.cancel()
    clock.now += 0.5
    controller.actor_finished()
    controller.fire()  # one actor still running
    assert warmed == [] and controller.fired == 0
    clock.now += 0.1
    controller.actor_finished()  # the last one: both idle from ~0.5 s, reclaimed long before 4 s
    assert warmed == [2] and controller.fired == 1
    controller.round_finished()


def test_mode_none_never_arms_a_trigger() -> None:
    controller = PrewarmController(workload="w", actor_function="actor", monitor=WorkloadMonitor(window=2),
                                   keep_alive_s=1.0, prewarm=lambda n: None, records_since=lambda start: [],
                                   enabled=False)
    for _ in range(4):
        controller.round_started(num_actors=1)
        controller.round_finished()
    assert controller.monitor.windows(workload="w") == ([], []) and controller._timer is None


def test_a_scale_up_prewarms_the_actors_it_adds_and_the_next_round_waits_for_them() -> None:
    warmed, waits = [], []
    controller = PrewarmController(workload="w", actor_function="actor", monitor=WorkloadMonitor(), keep_alive_s=60.0,
                                   prewarm=warmed.append, records_since=lambda start: [], wait_warm=waits.append)
    controller.await_warm()
    assert waits == []                                   # nothing pre-warmed: no wait
    assert controller.scale_up(from_actors=4, to_actors=4) == 0 and controller.scale_up(from_actors=4, to_actors=2) == 0
    assert controller.scale_up(from_actors=2, to_actors=7) == 5
    assert warmed == [5] and controller.scaled_up == 5
    controller.await_warm()
    controller.await_warm()                              # once per pre-warm
    assert waits == [pytest.approx(30.0)]
    assert controller.extras() == {"prewarm/warmed": 0.0, "prewarm/scaled_up": 5.0, "prewarm/fired": 0.0}
    off = PrewarmController(workload="w", actor_function="actor", monitor=WorkloadMonitor(), keep_alive_s=60.0,
                            prewarm=warmed.append, records_since=lambda start: [], enabled=False)
    assert off.scale_up(from_actors=1, to_actors=8) == 0 and off.extras() == {} and warmed == [5]


def test_parked_actors_count_as_idle_since_they_were_parked() -> None:
    """The offpolicy workflow: a learner call is a round whose actors are the ranks parked when it starts."""
    clock, warmed = _Clock(), []
    monitor = _fed(starts=[0.5] * 5, fins=[4.0] * 5)
    controller = PrewarmController(workload="w", actor_function="actor", monitor=monitor, keep_alive_s=2.0,
                                   prewarm=warmed.append, records_since=lambda start: [], clock=clock)
    controller.round_started(num_actors=3, idle_s=[3.0, 1.0, 0.0])   # parked 3 s, 1 s and just now
    controller._timer.cancel()
    controller.fire()   # by the learner's finish (4 s): idle 7 s, 5 s and 4 s, all past the keep-alive of 2 s
    assert warmed == [3]
    controller.round_started(num_actors=2, idle_s=[0.0, 0.0])
    controller._timer.cancel()
    controller.keep_alive_s = 10.0
    controller.fire()   # idle 4 s by then, under a keep-alive of 10 s: still warm
    assert warmed == [3]
