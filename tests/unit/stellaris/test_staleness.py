"""Aggregation rules on hand-made arrival sequences (Stellaris §V-C, DESIGN.md §3, P7)."""

from __future__ import annotations

import itertools

import pytest

from nimbus.stellaris.rules import Arrival, make_rule, staleness_scale

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


def test_stellaris_round0_measures_max_staleness_then_decays_by_round():
    """warmup_rounds=0: the paper as written, δmax measured in round 0."""
    rule = make_rule(name="stellaris", learners=3, decay=0.5, root=3, warmup_rounds=0)
    rule.start_round(index=0)
    # round 0: three learners read version 0; each is applied on arrival, staleness 0, 1, 2
    for expected in (0, 1, 2):
        verdict = apply_if_any(rule, arrive(rule, read_version=0))
        assert [m.staleness for m in verdict.aggregation.members] == [expected]
    assert rule.threshold is None
    rule.start_round(index=1)
    assert rule.threshold == 1.0                              # β_1 = δmax 2 · 0.5
    assert arrive(rule, read_version=1).aggregation is None  # staleness 2: mean 2 > 1, waits
    verdict = apply_if_any(rule, arrive(rule, read_version=3))   # a fresh one: mean 1 ≤ 1
    members = verdict.aggregation.members
    assert [m.staleness for m in members] == [2, 0]
    assert [m.scale for m in members] == pytest.approx([2 ** (-1 / 3), 1.0])
    assert verdict.aggregation.separate_steps is False and rule.version == 4
    rule.start_round(index=2)
    assert rule.threshold == 0.5                              # β_2 = 2 · 0.5²


def test_stellaris_floors_delta_max_at_one():
    rule = make_rule(name="stellaris", learners=1, decay=1.0, warmup_rounds=0)
    apply_if_any(rule, arrive(rule, read_version=0))
    rule.start_round(index=1)
    assert rule.threshold == 1.0


def test_stellaris_refuses_a_gradient_no_queue_could_admit():
    rule = make_rule(name="stellaris", learners=2, decay=1.0, max_queue=3, warmup_rounds=0)
    for _ in range(2):
        apply_if_any(rule, arrive(rule, read_version=0))      # δmax = 1, version 2
    rule.start_round(index=1)                                 # β · max_queue = 3
    rule.version = 5
    verdict = arrive(rule, read_version=1)                   # staleness 4 > 3: refused, nothing applied
    assert verdict.aggregation is None
    assert [(r.staleness, "never admissible" in r.reason) for r in verdict.rejected] == [(4, True)]
    assert rule.version == 5 and rule.queue == []
    verdict = arrive(rule, read_version=2)                   # staleness 3 = 3: queued (mean 3 > 1), not refused
    assert verdict.aggregation is None and verdict.rejected == () and len(rule.queue) == 1


def test_stellaris_queue_sheds_its_stalest_gradient():
    rule = make_rule(name="stellaris", learners=2, decay=0.5, max_queue=2, warmup_rounds=0)
    for _ in range(2):
        apply_if_any(rule, arrive(rule, read_version=0))      # δmax 1; version 2
    rule.start_round(index=1)                                 # β_1 = 0.5
    assert arrive(rule, read_version=1).aggregation is None  # mean 1 waits
    assert arrive(rule, read_version=1).aggregation is None  # mean 1 waits
    verdict = arrive(rule, read_version=2)                   # queue of 3 > 2: a stale one shed; mean 0.5 → aggregate
    assert [(r.reason, r.staleness) for r in verdict.rejected] == [("queue full", 1)]
    assert [m.staleness for m in verdict.aggregation.members] == [1, 0]


def test_stellaris_code_seeds_with_int_mean_plus_one_flushes_at_learner_count_and_steps_separately():
    rule = make_rule(name="stellaris_code", learners=3, decay=0.1)
    for _ in range(3):
        apply_if_any(rule, arrive(rule, read_version=0))      # stalenesses 0, 1, 2
    rule.start_round(index=1)
    assert rule.seed == 2                                     # int(mean 1) + 1
    assert rule.threshold == 1                                # clip(int(2 · 0.1) + 1, 1, 2)
    assert arrive(rule, read_version=rule.version - 2).aggregation is None    # mean 2 > 1: kept (never refused)
    assert arrive(rule, read_version=rule.version - 2).aggregation is None
    verdict = arrive(rule, read_version=rule.version - 2)                     # 3 pending = learners: flushed
    assert [m.staleness for m in verdict.aggregation.members] == [2, 2, 2]
    assert verdict.aggregation.separate_steps
    rule.applied(aggregation=verdict.aggregation)
    assert rule.version == 4


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


def _seed_stellaris(rule, *, delta_max: int):
    """Round 0 with gradients of staleness 0..delta_max (each applied on arrival), then round 1 starts."""
    rule.start_round(index=0)
    for _ in range(delta_max + 1):
        apply_if_any(rule, arrive(rule, read_version=0))
    rule.start_round(index=1)


def test_stellaris_scales_by_the_configured_root():
    """Eq. 4 with v = 2: a gradient of staleness 4 steps at α0 / 4^(1/2), in round 0 and after."""
    rule = make_rule(name="stellaris", learners=1, decay=1.0, root=2, warmup_rounds=0)
    rule.start_round(index=0)
    scales = [apply_if_any(rule, arrive(rule, read_version=0)).aggregation.members[0].scale for _ in range(5)]
    assert scales == pytest.approx([1.0, 1.0, 2 ** -0.5, 3 ** -0.5, 0.5])
    rule.start_round(index=1)                                  # δmax 4
    verdict = apply_if_any(rule, arrive(rule, read_version=rule.version - 3))
    assert [(m.staleness, m.scale) for m in verdict.aggregation.members] == [(3, pytest.approx(3 ** -0.5))]


def test_stellaris_default_queue_holds_twice_the_learners():
    """docs/stellaris.md: max_queue defaults to 2 × learners, so with β = 1 and two learners a gradient of
    staleness 4 can still be admitted by fresh ones (queued), and one of staleness 5 never can (refused)."""
    rule = make_rule(name="stellaris", learners=2, decay=1.0, warmup_rounds=0)
    _seed_stellaris(rule, delta_max=1)                         # β_1 = 1, version 2
    rule.version = 10
    verdict = arrive(rule, read_version=6)                     # staleness 4 ≤ 1 · 4
    assert verdict.aggregation is None and verdict.rejected == () and len(rule.queue) == 1
    verdict = arrive(rule, read_version=5)                     # staleness 5 > 4
    assert [r.staleness for r in verdict.rejected] == [5] and len(rule.queue) == 1
    for _ in range(2):
        assert arrive(rule, read_version=10).aggregation is None   # means 2, 4/3 > 1
    verdict = arrive(rule, read_version=10)                    # 4 queued, mean 1 ≤ 1: all four aggregated
    assert sorted(m.staleness for m in verdict.aggregation.members) == [0, 0, 0, 4] and verdict.rejected == ()


def test_stellaris_measurement_without_any_gradient_goes_on():
    """A measurement round that delivered no gradient (its learners all failed) seeds nothing: the next round
    is still threshold-free and measures; the first round with a gradient seeds δmax."""
    rule = make_rule(name="stellaris", learners=2, decay=0.5, warmup_rounds=0)
    rule.start_round(index=0)
    rule.start_round(index=1)
    assert rule.threshold is None
    verdict = apply_if_any(rule, arrive(rule, read_version=rule.version))
    assert [m.staleness for m in verdict.aggregation.members] == [0]
    rule.start_round(index=2)
    assert rule.threshold == pytest.approx(0.25)   # δmax 1 · 0.5²
