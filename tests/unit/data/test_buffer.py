"""Buffer: cyclic shared-memory rows, idempotent ingest (P2), wrap-around, attach from another process."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nimbus.algos.base import KeySpec
from nimbus.data.buffer import Buffer, IngestEvent
from nimbus.data.shm import PREFIX_ENV, SharedMemoryTooSmall, list_segments

SPEC = {"obs": KeySpec(shape=(2,), dtype="float32"), "reward": KeySpec(shape=(), dtype="float32"),
        "done": KeySpec(shape=(), dtype="bool")}
BUFFER_ROWS, BUFFER_ACTORS = 8, 4  # the ``buf`` fixture's (tests/unit/data/conftest.py)


def rows(n: int, start: int = 0) -> dict[str, np.ndarray]:
    steps = np.arange(start, start + n, dtype=np.float32)
    return {"obs": np.stack([steps, -steps], axis=1), "reward": steps, "done": steps % 2 == 0}


def test_ingest_then_read(buf: Buffer) -> None:
    assert buf.ingest(invocation_id="a", actor_rank=1, policy_version=3, arrays=rows(3))
    got = buf.read(indices=np.array([2, 0]))
    assert got["reward"].tolist() == [2.0, 0.0] and got["obs"].tolist() == [[2, -2], [0, 0]]
    assert got["done"].dtype == np.bool_
    assert buf.read(indices=np.array([1]), keys=["reward"]).keys() == {"reward"}
    assert buf.read_meta(indices=np.arange(3))["ingest_seq"].tolist() == [0, 1, 2]
    assert (buf.size_rows, buf.total_rows_ingested) == (3, 3)
    assert (buf.rows_by_actor(), buf.versions_by_actor()) == ({1: 3}, {1: 3})
    stats = buf.stats()
    assert (stats.total_ingests, stats.latest_policy_version, stats.actors_seen) == (1, 3, 1)


def test_duplicate_ingest_changes_nothing(buf: Buffer) -> None:  # P2
    assert buf.ingest(invocation_id="inv-1", actor_rank=0, policy_version=0, arrays=rows(3))
    before = buf.stats()
    assert not buf.ingest(invocation_id="inv-1", actor_rank=0, policy_version=0, arrays=rows(3, start=50))
    assert not buf.ingest(invocation_id="inv-1", actor_rank=2, policy_version=1, arrays=rows(5))
    after = buf.stats()
    assert after == dataclasses.replace(before, duplicate_ingests=2)
    assert buf.read(indices=np.arange(3))["reward"].tolist() == [0, 1, 2]
    assert buf.rows_by_actor() == {0: 3}


def test_shape_mismatch_names_key_expected_and_actual(buf: Buffer) -> None:
    bad = {**rows(3), "obs": np.zeros((3, 5))}
    with pytest.raises(ValueError, match=r"'obs'.*\(2,\).*\(3, 5\)"):
        buf.ingest(invocation_id="a", actor_rank=0, policy_version=0, arrays=bad)
    assert buf.stats().total_ingests == 0


@pytest.mark.parametrize("arrays, message", [
    ({k: v for k, v in rows(2).items() if k != "done"}, "missing \\['done'\\]"),
    ({**rows(2), "extra": np.zeros(2)}, "unknown \\['extra'\\]"),
    ({**rows(2), "reward": np.zeros(3)}, "3 rows"),
    ({**rows(2), "reward": np.float32(1)}, "'reward'"),
    (rows(9), "capacity"),
])
def test_bad_ingests_raise_value_error(buf: Buffer, arrays: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        buf.ingest(invocation_id="a", actor_rank=0, policy_version=0, arrays=arrays)
    assert buf.ingest(invocation_id="a", actor_rank=0, policy_version=0, arrays=rows(1))  # id not burnt


def test_actor_rank_out_of_range(buf: Buffer) -> None:
    with pytest.raises(ValueError, match="actor_rank 4"):
        buf.ingest(invocation_id="a", actor_rank=4, policy_version=0, arrays=rows(1))


def test_dtype_is_cast(buf: Buffer) -> None:
    buf.ingest(invocation_id="a", actor_rank=0, policy_version=0,
               arrays={"obs": [[1, 2]], "reward": np.array([7], np.int64), "done": np.array([1])})
    got = buf.read(indices=np.array([0]))
    assert got["reward"].dtype == np.float32 and got["reward"][0] == 7.0 and got["done"][0]


def test_wrap_around_overwrites_the_oldest_and_counts_unread(buf: Buffer) -> None:
    events: list[IngestEvent] = []
    buf.subscribe(callback=events.append)
    buf.ingest(invocation_id="a", actor_rank=0, policy_version=0, arrays=rows(6))
    buf.mark_read(indices=np.arange(2))  # rows 0 and 1 were consumed
    buf.ingest(invocation_id="b", actor_rank=1, policy_version=1, arrays=rows(5, start=6))
    assert events[1].slices == ((6, 8), (0, 3)) and events[1].first_seq == 6
    assert buf.size_rows == 8 and buf.write_index == 3 and buf.total_rows_ingested == 11
    assert buf.read(indices=np.arange(8))["reward"].tolist() == [8, 9, 10, 3, 4, 5, 6, 7]
    stats = buf.stats()
    assert (stats.overwritten_rows, stats.overwritten_unread_rows) == (3, 1)
    assert buf.positions_since(seq=4).tolist() == [4, 5, 6, 7, 0, 1, 2]
    assert buf.positions_since(seq=0).tolist() == [3, 4, 5, 6, 7, 0, 1, 2]  # rows 0..2 are gone


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(min_value=0, max_value=7), max_size=12), capacity=st.integers(1, 7))
def test_round_trip_across_wrap_around(sizes: list[int], capacity: int) -> None:
    with Buffer.create(spec=SPEC, capacity_rows=capacity, max_actors=2) as buf:
        written: list[float] = []
        for i, n in enumerate(min(n, capacity) for n in sizes):
            buf.ingest(invocation_id=str(i), actor_rank=i % 2, policy_version=i, arrays=rows(n, start=len(written)))
            written += [float(x) for x in range(len(written), len(written) + n)]
        kept = written[len(written) - buf.size_rows:]
        positions = buf.positions_since(seq=0)
        assert buf.read(indices=positions)["reward"].tolist() == kept
        assert buf.read_meta(indices=positions)["ingest_seq"].tolist() == [int(x) for x in kept]
        assert buf.stats().overwritten_rows == len(written) - buf.size_rows
        assert buf.total_rows_ingested == len(written)


def test_rows_are_read_only_zero_copy_views(buf: Buffer) -> None:
    buf.ingest(invocation_id="a", actor_rank=0, policy_version=0, arrays=rows(4))
    view = buf.rows(start=1, stop=3)["reward"]
    assert view.tolist() == [1.0, 2.0] and not view.flags.writeable and not view.flags.owndata
    buf.ingest(invocation_id="b", actor_rank=0, policy_version=0, arrays=rows(6, start=100))  # wraps over 1, 2
    assert view.tolist() == [105.0, 2.0]
    with pytest.raises(IndexError):
        buf.rows(start=0, stop=9)
    with pytest.raises(IndexError):
        buf.read(indices=np.array([8]))


def test_zero_rows_and_zero_size_keys() -> None:
    spec = {"empty": KeySpec(shape=(0,), dtype="float32"), "x": KeySpec(shape=(), dtype="int64")}
    with Buffer.create(spec=spec, capacity_rows=4) as buf:
        assert buf.ingest(invocation_id="none", actor_rank=0, policy_version=0,
                          arrays={"empty": np.zeros((0, 0)), "x": np.zeros(0)})
        assert buf.ingest(invocation_id="two", actor_rank=0, policy_version=0,
                          arrays={"empty": np.zeros((2, 0)), "x": np.array([5, 6])})
        assert buf.read(indices=np.array([1]))["x"].tolist() == [6] and buf.size_rows == 2


def test_subscribe_and_unsubscribe(buf: Buffer) -> None:
    events: list[IngestEvent] = []
    unsubscribe = buf.subscribe(callback=events.append)
    buf.ingest(invocation_id="a", actor_rank=2, policy_version=5, arrays=rows(2))
    buf.ingest(invocation_id="a", actor_rank=2, policy_version=5, arrays=rows(2))  # duplicate: no event
    unsubscribe()
    buf.ingest(invocation_id="b", actor_rank=2, policy_version=5, arrays=rows(2))
    assert events == [IngestEvent(invocation_id="a", actor_rank=2, policy_version=5, rows=2, first_seq=0,
                                  slices=((0, 2),))]


def test_descriptor_is_json_and_attached_buffer_is_read_only(buf: Buffer) -> None:
    buf.ingest(invocation_id="a", actor_rank=0, policy_version=0, arrays=rows(2))
    reader = Buffer.attach(descriptor=json.loads(json.dumps(buf.descriptor())))
    assert reader.read(indices=np.array([1]))["reward"].tolist() == [1.0]
    buf.ingest(invocation_id="b", actor_rank=3, policy_version=4, arrays=rows(1, start=9))
    assert reader.size_rows == 3 and reader.rows_by_actor() == {0: 2, 3: 1}  # header is shared
    with pytest.raises(RuntimeError, match="read-only"):
        reader.ingest(invocation_id="c", actor_rank=0, policy_version=0, arrays=rows(1))
    reader.close()
    assert buf.read(indices=np.array([2]))["reward"].tolist() == [9.0]


def test_attach_from_another_process_reads_the_same_rows(buf: Buffer, prefix: str) -> None:
    buf.ingest(invocation_id="a", actor_rank=1, policy_version=2, arrays=rows(5))
    code = ("import json, sys\nimport numpy as np\nfrom nimbus.data.buffer import Buffer\n"
            "b = Buffer.attach(descriptor=json.loads(sys.argv[1]))\n"
            "v = b.rows(start=0, stop=b.size_rows)\n"
            "print(json.dumps({'obs': v['obs'].tolist(), 'done': v['done'].tolist(), 'actors': b.rows_by_actor()}))\n"
            "b.close()")
    env = {**os.environ, PREFIX_ENV: prefix}
    done = subprocess.run([sys.executable, "-c", code, json.dumps(buf.descriptor())], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out == {"obs": rows(5)["obs"].tolist(), "done": rows(5)["done"].tolist(), "actors": {"1": 5}}
    assert len(list_segments(prefix=prefix)) == 3 + 4 + 1  # the reader's exit unlinked nothing


def test_close_unlinks_the_creators_segments_only(prefix: str) -> None:
    buf = Buffer.create(spec=SPEC, capacity_rows=4)
    assert len(list_segments(prefix=prefix)) == len(SPEC) + 4 + 1
    reader = Buffer.attach(descriptor=buf.descriptor())
    reader.close()
    assert len(list_segments(prefix=prefix)) == len(SPEC) + 4 + 1
    buf.close()
    assert list_segments(prefix=prefix) == []


def test_create_validates_arguments() -> None:
    with pytest.raises(ValueError, match="capacity_rows"):
        Buffer.create(spec=SPEC, capacity_rows=0)
    with pytest.raises(SharedMemoryTooSmall, match="shared memory"):
        Buffer.create(spec={"big": KeySpec(shape=(1 << 20, 1 << 20), dtype="float64")}, capacity_rows=1 << 20)
