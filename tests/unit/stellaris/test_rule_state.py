"""A rule's state survives a checkpoint (issue 26 item 8): a restored rule continues as if uninterrupted.

The review resumed a run whose δmax was 7: the resumed rule restarted δmax at 1, so at d 0.99 β_40 was
0.99^40 = 0.669 instead of 7 · 0.99^40 = 4.683.
"""

from __future__ import annotations

import itertools
import json

import pytest

from nimbus.stellaris.rules import RULES, Arrival, make_rule

_keys = itertools.count()


def offer(rule, *, staleness: int, slot: int = 0):
    verdict = rule.offer(arrival=Arrival(key=f"g{next(_keys)}", slot=slot, read_version=rule.version - staleness))
    if verdict.aggregation is not None:
        rule.applied(aggregation=verdict.aggregation)
    return verdict


def run_to_round_40(name: str):
    """Round 0 cold (staleness 9, excluded by `stellaris`), then δmax 7 measured in round 1 (after 8 fresh
    aggregations, so that a learner of round 1 can be 7 behind); rounds up to 39, the queue emptied."""
    rule = make_rule(name=name, learners=3, decay=0.99)
    for index in range(40):
        rule.start_round(index=index)
        trace = [9, 9] if index == 0 else [1] * 8 + [7, 2, 3, 1] if index == 1 else [7, 2, 3, 1]
        for slot, staleness in enumerate(trace):
            offer(rule, staleness=staleness, slot=slot % 3)
    while getattr(rule, "queue", []):
        offer(rule, staleness=0)
    return rule


def resumed(rule):
    state = json.loads(json.dumps(rule.state()))     # what a checkpoint manifest stores
    fresh = make_rule(name=rule.name, learners=3, decay=0.99)
    fresh.version = rule.version                     # the workflow sets it from the checkpoint's policy version
    fresh.restore(state=state)
    return fresh


def test_restored_stellaris_rule_has_the_issues_beta_at_round_40():
    rule = run_to_round_40("stellaris")
    again = resumed(rule)
    for r in (rule, again):
        r.start_round(index=40)
    assert again.threshold == pytest.approx(7 * 0.99 ** 40) == pytest.approx(4.683, abs=1e-3)
    assert again.threshold == rule.threshold


@pytest.mark.parametrize("name", RULES)
def test_a_restored_rule_decides_as_the_uninterrupted_one(name):
    rule = run_to_round_40(name)
    again = resumed(rule)
    assert again.state() == rule.state()
    for index in range(40, 60):
        for r in (rule, again):
            r.start_round(index=index)
        assert again.threshold == rule.threshold
        for slot, staleness in enumerate([4, 0, 6, 2, 5]):
            for r in (rule, again):
                r.may_launch(slot=slot % 3)
            a, b = offer(rule, staleness=staleness, slot=slot % 3), offer(again, staleness=staleness, slot=slot % 3)
            assert [(m.staleness, m.scale) for m in (b.aggregation.members if b.aggregation else ())] == \
                [(m.staleness, m.scale) for m in (a.aggregation.members if a.aggregation else ())]
            assert [x.staleness for x in b.rejected] == [x.staleness for x in a.rejected]
    assert again.state() == rule.state()


def test_restoring_another_rules_state_is_refused():
    with pytest.raises(ValueError, match="cannot restore rule 'stellaris_code' from the state of rule 'stellaris'"):
        make_rule(name="stellaris_code", learners=1).restore(state=make_rule(name="stellaris", learners=1).state())
