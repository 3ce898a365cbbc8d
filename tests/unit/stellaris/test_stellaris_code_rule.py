"""`stellaris_code` is the authors' threshold (issue 26 item 5): an integer ≥ 1, no staleness scale.

IntelliSys-Lab/Stellaris-SC24 evaluation/experiment/stellaris.py: max_staleness = int(mean staleness of the first
round whose mean is > 0) + 1, and the bound of round_id r is clip(int(max_staleness · decay^(r − 1)) + 1, 1,
max_staleness); nimbus's round k is their round_id k + 1. The issue's run: a mean of 1.55 gave nimbus a float
seed 2.55 whose threshold decayed to 0.22 by round 60 (d 0.96); theirs is 2, and 1 from round 17 on.
"""

from __future__ import annotations

import itertools

from nimbus.stellaris.rules import Arrival, make_rule

_keys = itertools.count()


def offer(rule, *, staleness: int):
    verdict = rule.offer(arrival=Arrival(key=f"g{next(_keys)}", slot=0, read_version=rule.version - staleness))
    if verdict.aggregation is not None:
        rule.applied(aggregation=verdict.aggregation)
    return verdict


def seeded(*, stalenesses: list[int], decay: float = 0.96, learners: int = 3):
    rule = make_rule(name="stellaris_code", learners=learners, decay=decay)
    rule.start_round(index=0)
    for s in stalenesses:
        offer(rule, staleness=s)
    rule.start_round(index=1)
    return rule


def test_threshold_is_their_integer_clip():
    rule = seeded(stalenesses=[1] * 9 + [2] * 11)              # mean 1.55
    assert rule.seed == 2
    thresholds = {}
    for k in range(1, 61):
        rule.start_round(index=k)
        thresholds[k] = rule.threshold
    assert all(isinstance(t, int) and 1 <= t <= 2 for t in thresholds.values())
    assert thresholds == {k: min(max(int(2 * 0.96 ** k) + 1, 1), 2) for k in range(1, 61)}
    assert thresholds[1] == 2 and thresholds[16] == 2 and thresholds[17] == 1 and thresholds[60] == 1


def test_at_threshold_one_a_gradient_of_staleness_one_is_aggregated_at_once():
    """nimbus's float threshold (0.22 at round 60) held such a gradient until `learners` were pending."""
    rule = seeded(stalenesses=[1] * 9 + [2] * 11)
    rule.start_round(index=60)
    verdict = offer(rule, staleness=1)
    assert verdict.aggregation is not None and [m.staleness for m in verdict.aggregation.members] == [1]


def test_no_staleness_scale():
    """A gradient of staleness 4 or 8 steps unscaled (the paper's 1/δ^(1/3) would be 0.63 and 0.5)."""
    rule = seeded(stalenesses=[3, 5, 8], decay=1.0)           # seed int(16/3) + 1 = 6, threshold 6
    assert rule.seed == 6 and rule.threshold == 6
    assert [m.scale for m in offer(rule, staleness=4).aggregation.members] == [1.0]
    assert offer(rule, staleness=8).aggregation is None       # mean 8 > 6: waits
    verdict = offer(rule, staleness=0)                        # mean 4: both, unscaled
    assert [(m.staleness, m.scale) for m in verdict.aggregation.members] == [(8, 1.0), (0, 1.0)]
    lone = make_rule(name="stellaris_code", learners=1, decay=1.0)
    assert [m.scale for m in offer(lone, staleness=8).aggregation.members] == [1.0]   # before the seed too


def test_seed_waits_for_a_round_with_a_positive_mean():
    """Their ``if info["grad_staleness_mean"] > 0 and not max_staleness``: a round of fresh gradients seeds
    nothing, and the next round is still applied on arrival."""
    rule = seeded(stalenesses=[0, 0, 0])
    assert rule.seed is None and rule.threshold is None
    for s in (0, 1, 2, 3):
        assert offer(rule, staleness=s).aggregation is not None
    rule.start_round(index=2)
    assert rule.seed == 2 and rule.threshold == 2               # int(1.5) + 1; clip(int(2 · 0.96²) + 1, 1, 2)
