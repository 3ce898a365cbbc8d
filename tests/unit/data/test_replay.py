"""FullBatch: every new row once, in an order that does not depend on which actor finished first."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from protocol_helpers import assert_implements

from nimbus.algos.base import KeySpec
from nimbus.data.buffer import Buffer
from nimbus.data.replay import FullBatch, ReplayStrategy

SPEC = {"x": KeySpec(shape=(), dtype="int64"), "obs": KeySpec(shape=(2,), dtype="float32")}
BUFFER_ROWS, BUFFER_ACTORS = 16, 8  # the ``buf`` fixture's (tests/unit/data/conftest.py)


def ingest(buf: Buffer, *, actor: int, version: int, n: int, inv: str | None = None) -> None:
    x = np.array([actor * 1000 + version * 100 + i for i in range(n)])
    buf.ingest(invocation_id=inv or f"{actor}/{version}", actor_rank=actor, policy_version=version,
               arrays={"x": x, "obs": np.stack([x, x], axis=1)})


def test_full_batch_is_a_replay_strategy() -> None:
    assert_implements(FullBatch(), ReplayStrategy, methods=("select", "consumed"))


def test_not_ready_until_min_rows(buf: Buffer) -> None:
    strategy = FullBatch(min_rows=4)
    assert strategy.select(buffer=buf) is None
    ingest(buf, actor=0, version=0, n=3)
    assert strategy.select(buffer=buf) is None
    ingest(buf, actor=1, version=0, n=1)
    assert len(strategy.select(buffer=buf)) == 4
    with pytest.raises(ValueError):
        FullBatch(min_rows=0)


def test_order_is_version_then_actor_then_ingest_order(buf: Buffer) -> None:
    ingest(buf, actor=2, version=1, n=2)
    ingest(buf, actor=0, version=1, n=2)
    ingest(buf, actor=1, version=0, n=1)
    ingest(buf, actor=0, version=1, n=1, inv="second ingest of actor 0")
    indices = FullBatch().select(buffer=buf)
    assert buf.read(indices=indices)["x"].tolist() == [1000, 100, 101, 100, 2100, 2101]


def test_consumed_clears_the_selected_rows_only(buf: Buffer) -> None:
    strategy = FullBatch()
    ingest(buf, actor=0, version=0, n=3)
    first = strategy.select(buffer=buf)
    ingest(buf, actor=1, version=0, n=2)  # arrives while the learner works on `first`
    strategy.consumed(indices=first)
    assert strategy.pending_from_seq == 3
    second = strategy.select(buffer=buf)
    assert buf.read(indices=second)["x"].tolist() == [1000, 1001]
    strategy.consumed(indices=second)
    assert strategy.select(buffer=buf) is None
    with pytest.raises(ValueError, match="without a select"):
        strategy.consumed(indices=second)


def test_consumed_rows_overwritten_are_not_counted_as_lost(buf: Buffer) -> None:
    strategy = FullBatch()
    ingest(buf, actor=0, version=0, n=10)
    strategy.consumed(indices=strategy.select(buffer=buf))
    ingest(buf, actor=0, version=1, n=10)  # overwrites 4 consumed rows
    assert buf.stats().overwritten_unread_rows == 0
    ingest(buf, actor=0, version=2, n=10)  # overwrites 6 consumed rows of version 0, 4 unread of version 1
    assert buf.stats().overwritten_unread_rows == 4
    assert len(strategy.select(buffer=buf)) == 16  # the 6 rows left of version 1, all 10 of version 2


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3), st.integers(0, 3)),
                        min_size=1, max_size=8, unique_by=lambda t: (t[0], t[1])),
       order=st.randoms(use_true_random=False))
def test_batch_is_independent_of_arrival_order(batches: list[tuple[int, int, int]], order) -> None:
    shuffled = list(batches)
    order.shuffle(shuffled)
    got = []
    for arrivals in (batches, shuffled):
        with Buffer.create(spec=SPEC, capacity_rows=32, max_actors=8) as buf:
            for actor, version, n in arrivals:
                ingest(buf, actor=actor, version=version, n=n)
            indices = FullBatch().select(buffer=buf)
            got.append(None if indices is None else buf.read(indices=indices))
    if got[0] is None:
        assert got[1] is None
    else:
        for key in SPEC:
            np.testing.assert_array_equal(got[0][key], got[1][key])
        meta_sorted = sorted((v, a, i) for a, v, n in batches for i in range(n))
        assert got[0]["x"].tolist() == [a * 1000 + v * 100 + i for v, a, i in meta_sorted]
