"""No rule waits forever (issue 26 item 6, rule side): lost gradients and the progress watchdog.

Under `sync` one NaN gradient hung the run: the learner's non-finite branch never told the rule, whose queue
waited for a gradient that would never come while its per-version launch cap allowed no other learner; a
parameter function refusing every gradient stalled it the same way. `drive` below is what the workflow must
do: tell the rule of every launch, offer, publication, refusal and loss, and call `stalled()` (the watchdog)
whenever nothing is in flight and nothing can be launched.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nimbus.stellaris.rules import RULES, Arrival, make_rule

TASKS_PER_ROUND = 16


@dataclass
class Run:
    settled: int = 0
    applied: int = 0
    refused: int = 0
    lost: int = 0
    aggregations: int = 0
    stalls: int = 0


def drive(name: str, *, tasks: int = 48, learners: int = 3, lose=frozenset(), refuse_aggregations=frozenset(),
          max_events: int = 2_000) -> Run:
    """A fake workflow over ``tasks`` gradient tasks: learners land in launch order; task numbers in ``lose``
    are non-finite; aggregations numbered in ``refuse_aggregations`` are refused whole by the parameter function."""
    rule = make_rule(name=name, learners=learners, decay=0.8)
    run, in_flight, launched = Run(), {}, 0

    def settle(verdict) -> None:
        run.refused += len(verdict.rejected)
        run.settled += len(verdict.rejected)
        if verdict.aggregation is None:
            return
        members = verdict.aggregation.members
        run.settled += len(members)
        if run.aggregations in refuse_aggregations:
            rule.unpublished(aggregation=verdict.aggregation)
            run.lost += len(members)
        else:
            rule.applied(aggregation=verdict.aggregation)
            run.applied += len(members)
        run.aggregations += 1

    for _ in range(max_events):
        if run.settled == tasks:
            return run
        for slot in range(learners):
            if launched < tasks and slot not in in_flight and rule.may_launch(slot=slot):
                if launched % TASKS_PER_ROUND == 0:
                    rule.start_round(index=launched // TASKS_PER_ROUND)
                rule.launched(slot=slot)
                in_flight[slot] = Arrival(key=f"t{launched}", slot=slot, read_version=rule.version)
                launched += 1
        if not in_flight:                      # nothing can arrive: the watchdog
            run.stalls += 1
            settle(rule.stalled())
            continue
        arrival = in_flight.pop(next(iter(in_flight)))
        if int(arrival.key[1:]) in lose:
            rule.lost(arrival=arrival, reason="non-finite")
            run.lost += 1
            run.settled += 1
            continue
        settle(rule.offer(arrival=arrival))
    raise AssertionError(f"{name}: no progress after {max_events} events: {run}, holding {rule.holding}")


def test_sync_one_nan_gradient_does_not_hang_and_the_version_still_takes_learners_gradients():
    """The issue's hang: task 1 is non-finite. The lost gradient re-opens its launch at that version, so a
    fourth learner runs and the step still averages 3 gradients; the watchdog is needed only at the end."""
    run = drive("sync", tasks=48, lose={1})
    assert run.settled == 48 and run.lost == 1 and run.applied == 47
    assert run.stalls <= 1                      # the last version's partial queue, after the last task
    assert run.aggregations == 16               # 15 full steps of 3 + 2 at the end


def test_sync_survives_a_parameter_function_that_refuses_a_whole_aggregation():
    run = drive("sync", tasks=48, refuse_aggregations={0, 1})
    assert run.settled == 48 and run.lost == 6 and run.applied == 42 and run.stalls == 0


@pytest.mark.parametrize("name", RULES)
def test_no_rule_waits_forever(name):
    """Every rule, with non-finite gradients and a refused aggregation: every task is settled."""
    run = drive(name, tasks=64, lose={0, 5, 6, 7, 30}, refuse_aggregations={2})
    assert run.settled == 64 and run.lost >= 5
    assert run.applied + run.refused + run.lost == 64


def test_the_watchdog_settles_what_each_rule_holds():
    """A queue that nothing can complete: sync, softsync and stellaris_code aggregate it, stellaris refuses it."""
    for name, aggregates in [("sync", True), ("softsync", True), ("stellaris_code", True), ("stellaris", False)]:
        rule = make_rule(name=name, learners=3, softsync_k=3, decay=1.0, warmup_rounds=0)
        rule.start_round(index=0)
        for _ in range(3):                      # δmax 2, max_staleness 2: β 2 (sync: one step)
            verdict = rule.offer(arrival=Arrival(key="s", slot=0, read_version=0))
            if verdict.aggregation is not None:
                rule.applied(aggregation=verdict.aggregation)
        rule.start_round(index=5)
        verdict = rule.offer(arrival=Arrival(key="held", slot=0, read_version=rule.version - 3 * (name != "sync")))
        assert verdict.aggregation is None and rule.holding == 1, name
        verdict = rule.stalled()
        assert rule.holding == 0, name
        assert (verdict.aggregation is not None) == aggregates, name
        assert [r.key for r in verdict.rejected] == ([] if aggregates else ["held"]), name


def test_sync_lost_gradient_reopens_its_launch():
    rule = make_rule(name="sync", learners=2)
    for slot in (0, 1):
        rule.launched(slot=slot)
    assert not rule.may_launch(slot=0)
    rule.lost(arrival=Arrival(key="nan", slot=1, read_version=0), reason="non-finite")
    assert rule.may_launch(slot=1)
