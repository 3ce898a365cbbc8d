"""Aggregation rules on hand-made arrival sequences (Stellaris §V-C, DESIGN.md §3, P7)."""

from __future__ import annotations

import itertools

import pytest

from nimbus.control.staleness import Arrival, make_rule, staleness_scale


_keys = itertools.count()


def arrive(rule, *, read_version: int, slot: int = 0):
    key = f"grad/{next(_keys)}"
    return rule.offer(arrival=Arrival(key=key, slot=slot, read_version=read_version))


def apply_if_any(rule, verdict):
    if verdict.aggregation is not None:
        rule.applied(aggregation=verdict.aggregation)
    return verdict


def test_scale_is_the_cube_root_of_staleness():
    assert staleness_scale(staleness=0, root=3) == 1.0
    assert staleness_scale(staleness=1, root=3) == 1.0
    assert staleness_scale(staleness=8, root=3) == pytest.approx(0.5)
    assert staleness_scale(staleness=27, root=3) == pytest.approx(1 / 3)
    assert staleness_scale(staleness=4, root=2) == pytest.approx(0.5)


def test_stellaris_round0_measures_max_staleness_then_decays():
    rule = make_rule(name="stellaris", learners=3, decay=0.5, root=3)
    # round 0: three learners read version 0; each is applied on arrival, staleness 0, 1, 2
    for expected in (0, 1, 2):
        verdict = apply_if_any(rule, arrive(rule, read_version=0))
        assert [m.staleness for m in verdict.aggregation.members] == [expected]
    assert rule.threshold == 2.0             # δmax
    # aggregation 0 after round 0: β_0 = 2; mean staleness 2 ≤ 2 → aggregated at once
    verdict = apply_if_any(rule, arrive(rule, read_version=1))
    assert [m.staleness for m in verdict.aggregation.members] == [2]
    assert verdict.aggregation.members[0].scale == pytest.approx(2 ** (-1 / 3))
    assert rule.threshold == 1.0             # β_1 = 2 · 0.5
    # a gradient of staleness 2 waits: mean 2 > 1
    assert arrive(rule, read_version=2).aggregation is None
    # a fresh one brings the mean to 1 ≤ 1: both aggregated, in one step, scaled 2^(-1/3) and 1
    verdict = apply_if_any(rule, arrive(rule, read_version=4))
    members = verdict.aggregation.members
    assert [m.staleness for m in members] == [2, 0]
    assert [m.scale for m in members] == pytest.approx([2 ** (-1 / 3), 1.0])
    assert verdict.aggregation.separate_steps is False and rule.version == 5
    assert rule.threshold == 0.5             # β_2 = 2 · 0.5²


def test_stellaris_floors_delta_max_at_one():
    rule = make_rule(name="stellaris", learners=1)
    apply_if_any(rule, arrive(rule, read_version=0))
    assert rule.threshold == 1.0


def test_stellaris_refuses_gradients_staler_than_round0():
    rule = make_rule(name="stellaris", learners=2, decay=1.0)
    for _ in range(2):
        apply_if_any(rule, arrive(rule, read_version=0))      # δmax = 1
    verdict = arrive(rule, read_version=0)                   # staleness 2 > 1
    assert verdict.aggregation is None
    assert [(r.staleness, r.reason.startswith("staler")) for r in verdict.rejected] == [(2, True)]
    assert rule.version == 2 and rule.queue == []            # weights unchanged, nothing queued


def test_stellaris_queue_sheds_its_stalest_gradient():
    rule = make_rule(name="stellaris", learners=2, decay=0.01, max_queue=2)
    for _ in range(2):
        apply_if_any(rule, arrive(rule, read_version=0))      # δmax 1; version 2
    apply_if_any(rule, arrive(rule, read_version=1))          # β_0 = 1: staleness 1 admitted; version 3
    assert arrive(rule, read_version=2).aggregation is None  # β_1 = 0.01: waits
    assert arrive(rule, read_version=2).aggregation is None
    verdict = arrive(rule, read_version=3)                   # queue of 3 > 2: a stale one shed; mean 0.5 > 0.01
    assert [r.reason for r in verdict.rejected] == ["queue full"] and verdict.aggregation is None
    verdict = arrive(rule, read_version=3)                   # shed the other stale one: mean 0 → aggregate
    assert [r.staleness for r in verdict.rejected] == [1]
    assert [m.staleness for m in verdict.aggregation.members] == [0, 0]


def test_stellaris_code_seeds_with_mean_plus_one_flushes_at_learner_count_and_steps_separately():
    rule = make_rule(name="stellaris_code", learners=3, decay=0.1)
    for _ in range(3):
        apply_if_any(rule, arrive(rule, read_version=0))      # stalenesses 0, 1, 2: mean 1
    assert rule.threshold == 2.0                              # mean + 1 (the paper's rule would give 2 too: max)
    rule2 = make_rule(name="stellaris_code", learners=2, decay=0.1)
    for _ in range(2):
        apply_if_any(rule2, arrive(rule2, read_version=0))    # 0, 1: mean 0.5 → 1.5; paper: max(1,1) = 1
    assert rule2.threshold == 1.5
    verdict = apply_if_any(rule2, arrive(rule2, read_version=1))   # staleness 1 ≤ 1.5: admitted
    assert verdict.aggregation.separate_steps and rule2.version == 3
    assert arrive(rule2, read_version=2).aggregation is None       # β_1 = 0.15 < 1
    verdict = arrive(rule2, read_version=2)                        # 2 pending = learners: flushed
    assert [m.staleness for m in verdict.aggregation.members] == [1, 1]
    rule2.applied(aggregation=verdict.aggregation)
    assert rule2.version == 5                                      # one version per member


def test_sync_waits_for_every_learner_of_the_version_and_refuses_stale():
    rule = make_rule(name="sync", learners=3)
    for slot in range(3):
        assert rule.may_launch(slot=slot)
        rule.launched(slot=slot)
    assert not rule.may_launch(slot=0)
    assert arrive(rule, read_version=0).aggregation is None
    assert arrive(rule, read_version=0).aggregation is None
    verdict = apply_if_any(rule, arrive(rule, read_version=0))
    assert len(verdict.aggregation.members) == 3 and rule.version == 1
    assert rule.may_launch(slot=0)
    verdict = arrive(rule, read_version=0)
    assert verdict.aggregation is None and verdict.rejected[0].staleness == 1 and rule.queue == []


def test_softsync_aggregates_every_k():
    rule = make_rule(name="softsync", learners=4, softsync_k=3)
    verdicts = [arrive(rule, read_version=0) for _ in range(3)]
    assert [v.aggregation is None for v in verdicts] == [True, True, False]
    assert len(verdicts[-1].aggregation.members) == 3


def test_ssp_blocks_a_slot_too_far_ahead():
    rule = make_rule(name="ssp", learners=2, ssp_bound=1)
    for _ in range(2):
        apply_if_any(rule, arrive(rule, read_version=rule.version, slot=0))
    assert rule.applied_per_slot[0] == 2
    assert not rule.may_launch(slot=0)     # 2 ahead of slot 1 > bound 1
    assert rule.may_launch(slot=1)
    apply_if_any(rule, arrive(rule, read_version=0, slot=1))
    assert rule.may_launch(slot=0)


def test_async_applies_every_gradient_at_once_unscaled():
    rule = make_rule(name="async", learners=2)
    apply_if_any(rule, arrive(rule, read_version=0))
    verdict = apply_if_any(rule, arrive(rule, read_version=0))
    assert verdict.aggregation.members[0].staleness == 1 and verdict.aggregation.members[0].scale == 1.0


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown aggregation rule"):
        make_rule(name="bogus", learners=1)
