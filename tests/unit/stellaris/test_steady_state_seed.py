"""δmax from steady state (issue 26 item 1): round 0's cold starts do not seed the `stellaris` threshold.

The review of the shipped CartPole config saw round 0's cold starts reach a staleness of 7 while steady state
peaked at 3-5; δmax = 7 kept β_k = δmax · d^k above the running staleness until about round 84 at d 0.99, so
the rule refused nothing and acted as `async`. The trace below is synthetic but shaped like that run: round 0
climbs to 7 (cold learners and a cold parameter function), one cold learner of round 0 lands in round 1 at 7,
every later gradient has staleness 3, 4 or 5.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from nimbus.config import load_config
from nimbus.stellaris.rules import Arrival, make_rule

REPO = Path(__file__).resolve().parents[3]
GRADIENTS_PER_ROUND = 16          # the shipped config: 4 epochs × 4 minibatches
_keys = itertools.count()


def shipped():
    return load_config(path=REPO / "configs" / "stellaris-cartpole.yaml").stellaris


def offer(rule, *, staleness: int) -> tuple[int, int]:
    """Offer a gradient of ``staleness``; apply what the rule aggregates. (aggregated, refused) counts."""
    verdict = rule.offer(arrival=Arrival(key=f"g{next(_keys)}", slot=0, read_version=rule.version - staleness))
    if verdict.aggregation is not None:
        rule.applied(aggregation=verdict.aggregation)
    return (0 if verdict.aggregation is None else len(verdict.aggregation.members)), len(verdict.rejected)


def trace(*, rounds: int, seed: int = 0) -> list[list[int]]:
    """Per round, the stalenesses of its gradients in arrival order."""
    rng = np.random.default_rng(seed)
    cold = [0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 3, 2, 1]
    steady = [[int(s) for s in rng.integers(3, 6, size=GRADIENTS_PER_ROUND)] for _ in range(rounds - 1)]
    steady[0][0] = 7   # a cold learner of round 0 landing in round 1: its learner read a version before round 1
    return [cold] + steady


def refused_per_round(rule, *, rounds: int) -> list[int]:
    refused = []
    for index, stalenesses in enumerate(trace(rounds=rounds)):
        rule.start_round(index=index)
        refused.append(sum(offer(rule, staleness=s)[1] for s in stalenesses))
    return refused


def test_delta_max_is_the_steady_state_maximum_not_round_0s():
    cfg = shipped()
    rule = make_rule(name="stellaris", learners=cfg.learners, decay=cfg.decay)
    for index, stalenesses in enumerate(trace(rounds=3)):
        rule.start_round(index=index)
        assert rule.threshold is None if index < 2 else rule.threshold is not None
        for s in stalenesses:
            offer(rule, staleness=s)
    assert rule.seed == 5.0                       # not 7: round 0 and its late learner are excluded
    assert rule.threshold == pytest.approx(5.0 * cfg.decay ** 2)


def test_the_shipped_rule_refuses_gradients_within_the_first_tens_of_rounds():
    """At the shipped d (0.99) and 3 learners (max_queue 6), β_k = 5 · 0.99^k falls below the steady mean
    staleness (4) at round 23; runs of 5s fill the queue earlier (round 12 on this trace), and refusals grow
    with k. Seeded with round 0's 7 (the paper as written) the same trace is refused nothing before round 49.
    (The trace is open-loop: the staleness does not answer the refusals, as it would in a run.)"""
    cfg = shipped()
    assert cfg.decay == 0.99 and cfg.rule == "stellaris"
    refused = refused_per_round(make_rule(name="stellaris", learners=cfg.learners, decay=cfg.decay), rounds=40)
    first = next((index for index, count in enumerate(refused) if count), None)
    assert first is not None and 10 <= first <= 30, refused
    assert sum(refused[30:]) > 30, refused        # 10 rounds × 16 gradients: most of a round's stalest ones
    paper = refused_per_round(make_rule(name="stellaris", learners=cfg.learners, decay=cfg.decay, warmup_rounds=0),
                              rounds=40)
    assert sum(paper) == 0, paper                 # the paper as written, on the same trace: never binds
