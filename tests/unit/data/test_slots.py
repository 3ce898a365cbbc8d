"""Slot pools and the zero-copy Channel: round trips over shapes and dtypes, slot release when the last
view dies, reference-counted broadcast, back-pressure counters (P13), oversized messages refused."""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from nimbus.data.broadcast import Broadcaster
from nimbus.data.channel import ChannelLimits, Inbox, MessageTooLarge, Outbox
from nimbus.data.codec import Message
from nimbus.data.frames import body_segment_prefix, new_segment_name
from nimbus.data.shm import list_segments, run_prefix
from nimbus.data.slots import PoolReader, SlotPool
from support import wait_for

POLL = {"timeout_s": 5.0, "interval_s": 0.005}  # wait_for: up to 5 s, every 5 ms

MiB = 1 << 20
DEFAULT_LIMITS = ChannelLimits()   # frozen, so one instance may be every call's default
DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8,
          np.uint64, np.uint32, np.uint16, np.uint8, np.bool_]


def new_pool(*, num_slots: int = 2, slot_bytes: int = MiB, max_readers: int = 1) -> SlotPool:
    return SlotPool.create(name=new_segment_name(prefix=run_prefix()), num_slots=num_slots, slot_bytes=slot_bytes,
                           max_readers=max_readers)


@contextlib.contextmanager
def pooled_pair(*, num_slots: int = 2, slot_bytes: int = MiB, limits: ChannelLimits = DEFAULT_LIMITS,
                compress_min_bytes: int | None = None, **inbox_options):
    a, b = socket.socketpair()
    inbox = Inbox(**inbox_options)
    inbox.add_source(source="peer", sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(), pid=os.getpid()))
    pool = new_pool(num_slots=num_slots, slot_bytes=slot_bytes)
    outbox = Outbox(sock=a, pool=pool, inline_max_bytes=64, compress_min_bytes=compress_min_bytes, limits=limits)
    try:
        yield outbox, inbox, pool
    finally:
        outbox.close(timeout_s=1.0)
        inbox.close()
        a.close()


arrays_strategy = st.dictionaries(
    keys=st.text(alphabet="abcdefgh_", min_size=1, max_size=6),
    values=st.sampled_from(DTYPES).flatmap(
        lambda dtype: hnp.arrays(dtype=dtype, shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=9))),
    min_size=1, max_size=4)


def test_round_trip_over_shapes_and_dtypes_and_slot_release() -> None:
    with pooled_pair(num_slots=2) as (outbox, inbox, pool):

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(arrays=arrays_strategy, header=st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
        def round_trip(arrays: dict[str, np.ndarray], header: dict[str, int]) -> None:
            outbox.send(message=Message(header=header, arrays=arrays), tag={"k": 1})
            envelope = inbox.get(timeout_s=10)
            assert envelope.message.header == header
            assert sorted(envelope.message.arrays) == sorted(arrays)
            for name, array in arrays.items():
                got = envelope.message.arrays[name]
                assert got.dtype == array.dtype.newbyteorder("=") and got.shape == array.shape
                np.testing.assert_array_equal(got, array)
                if envelope.slot is not None and got.size:
                    assert not got.flags.writeable  # a view of the sender's slot: read-only
            if envelope.slot is not None and any(array.size for array in arrays.values()):
                assert pool.busy() == 1  # views alive: the slot is held
            del envelope, got
            assert wait_for(lambda: pool.busy() == 0, **POLL)  # released when the last view died

        round_trip()
        assert outbox.stats().via_slot > 0


def test_a_surviving_view_or_tensor_keeps_the_slot() -> None:
    with pooled_pair(num_slots=2) as (outbox, inbox, pool):
        outbox.send(message=Message(arrays={"w": np.arange(1 << 16, dtype=np.float32).reshape(256, 256)}), tag={})
        envelope = inbox.get(timeout_s=10)
        assert envelope.slot is not None and pool.busy() == 1
        tensor = torch.from_numpy(envelope.message.arrays["w"][10:20])  # a view of a view, then a tensor
        del envelope
        assert pool.busy() == 1  # still read through the tensor
        assert float(tensor[0, 1]) == 10 * 256 + 1
        del tensor
        assert wait_for(lambda: pool.busy() == 0, **POLL)


def test_compressed_bodies_free_their_slot_at_once() -> None:
    with pooled_pair(num_slots=2, slot_bytes=4 * MiB, compress_min_bytes=MiB) as (outbox, inbox, pool):
        zeros = np.zeros(2 * MiB, np.uint8)
        outbox.send(message=Message(arrays={"z": zeros}), tag={})
        envelope = inbox.get(timeout_s=10)
        assert envelope.compressed and envelope.slot is None
        assert wait_for(lambda: pool.busy() == 0, **POLL)  # decompressed into private memory
        np.testing.assert_array_equal(envelope.message.arrays["z"], zeros)


def test_oversized_message_is_refused_before_it_is_sent() -> None:
    limits = ChannelLimits(max_message_bytes=MiB)
    with pooled_pair(limits=limits) as (outbox, inbox, pool):
        before = list_segments(prefix=run_prefix())
        with pytest.raises(MessageTooLarge, match=r"2097152 bytes.*limit of 1048576.*max_message_bytes"):
            outbox.send(message=Message(arrays={"big": np.zeros(2 * MiB, np.uint8)}), tag={"i": 0})
        assert outbox.flush(timeout_s=5) and outbox.stats().sent == 0
        assert list_segments(prefix=run_prefix()) == before  # no body was placed anywhere
        outbox.send(message=Message(arrays={"ok": np.zeros(MiB // 2, np.uint8)}), tag={"i": 1})
        assert inbox.get(timeout_s=10).tag == {"i": 1}


def test_full_pool_blocks_the_producer_until_a_slot_is_released() -> None:
    with pooled_pair(num_slots=2, limits=ChannelLimits(on_full="block")) as (outbox, inbox, pool):
        payload = np.ones(MiB // 2, np.uint8)
        for i in range(3):
            outbox.send(message=Message(arrays={"x": payload}), tag={"i": i})
        held = [inbox.get(timeout_s=10), inbox.get(timeout_s=10)]  # both slots pinned by the consumer
        time.sleep(0.2)
        assert outbox.stats().sent == 2 and outbox.stats().slots.busy_slots == 2  # the third waits
        del held
        assert inbox.get(timeout_s=10).tag == {"i": 2}
        assert outbox.flush(timeout_s=5)
        stats = outbox.stats()
        assert stats.sent == 3 and stats.slots.blocked >= 1 and stats.slots.blocked_s > 0.1


def test_full_pool_drops_and_counts_when_configured() -> None:
    errors = []
    with pooled_pair(num_slots=2, limits=ChannelLimits(on_full="drop")) as (outbox, inbox, pool):
        outbox._on_error = lambda tag, exc: errors.append((tag["i"], type(exc).__name__))
        held = []
        for i in range(5):
            outbox.send(message=Message(arrays={"x": np.ones(MiB // 2, np.uint8)}), tag={"i": i})
            assert outbox.flush(timeout_s=5)
            if i < 2:
                held.append(inbox.get(timeout_s=10))
        stats = outbox.stats()
        assert stats.sent == 2 and stats.dropped_full == 3 and stats.slots.dropped == 3
        assert errors == [(2, "SlotsExhausted"), (3, "SlotsExhausted"), (4, "SlotsExhausted")]


def test_bounded_outbox_queue_drops_and_counts_when_the_receiver_stalls() -> None:
    a, b = socket.socketpair()  # nobody reads b: the socket fills, the sender thread blocks, the queue fills
    outbox = Outbox(sock=a, inline_max_bytes=1 << 20, limits=ChannelLimits(max_queued_messages=2, on_full="drop"))
    accepted = [outbox.send(message=Message(arrays={"x": np.ones(1 << 16, np.uint8)}), tag={"i": i})
                for i in range(100)]
    assert not all(accepted) and outbox.stats().dropped_full == accepted.count(False) > 0
    b.close()  # the sender thread's send fails: the rest is reported, not kept
    outbox.close(timeout_s=5)
    a.close()


def test_bounded_inbox_queue_drops_and_counts() -> None:
    with pooled_pair(num_slots=4, max_pending=1, on_full="drop") as (outbox, inbox, pool):
        for i in range(20):
            outbox.send(message=Message(arrays={"x": np.full(1 << 12, i, np.uint8)}), tag={"i": i})
        assert outbox.flush(timeout_s=5)
        assert wait_for(lambda: inbox.stats().received == 20, **POLL)
        assert inbox.stats().dropped_full == 19 and inbox.stats().pending == 1
        assert inbox.get(timeout_s=1).tag == {"i": 0}
        assert wait_for(lambda: pool.busy() == 0, **POLL)  # dropped envelopes gave their slots back


def test_bounded_inbox_blocks_without_losing_anything() -> None:
    with pooled_pair(num_slots=4, max_pending=2, on_full="block") as (outbox, inbox, pool):
        for i in range(30):
            outbox.send(message=Message(arrays={"x": np.full(1 << 10, i, np.uint8)}), tag={"i": i})
        time.sleep(0.2)
        got = [inbox.get(timeout_s=10).tag["i"] for _ in range(30)]
        assert got == list(range(30)) and inbox.stats().blocked > 0


def test_broadcast_slot_is_freed_only_by_the_last_reader() -> None:
    pairs = [socket.socketpair() for _ in range(3)]
    inboxes = []
    for _, b in pairs:
        inbox = Inbox()
        inbox.add_source(source="caster", sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(),
                                                                                     pid=os.getpid()))
        inboxes.append(inbox)
    pool = new_pool(num_slots=1, max_readers=3)
    caster = Broadcaster(socks=[a for a, _ in pairs], pool=pool)
    weights = np.linspace(0, 1, 1 << 14, dtype=np.float32)
    assert caster.publish(message=Message(arrays={"w": weights}), tag={"version": 1}) == 3
    envelopes = [inbox.get(timeout_s=10) for inbox in inboxes]
    for envelope in envelopes:
        np.testing.assert_array_equal(envelope.message.arrays["w"], weights)
    del envelope
    for _ in range(3):
        assert pool.busy() == 1
        envelopes.pop()
    assert wait_for(lambda: pool.busy() == 0, **POLL)
    caster.close()
    for inbox in inboxes:
        inbox.close()
    for a, _ in pairs:
        a.close()


def test_pool_reader_refuses_out_of_range_leases() -> None:
    pool = new_pool(num_slots=2, slot_bytes=4096)
    reader = PoolReader.attach(name=pool.name)
    from nimbus.errors import CodecError

    with pytest.raises(CodecError, match="outside pool"):
        reader.lease(slot=2, reader=0, nbytes=16)
    with pytest.raises(CodecError, match="outside pool"):
        reader.lease(slot=0, reader=0, nbytes=8192)
    reader.close()
    pool.close()
    assert pool.name not in list_segments(prefix=run_prefix())


def test_pool_stats_count_threads_contending() -> None:
    pool = new_pool(num_slots=1)
    assert pool.acquire(readers=(0,), on_full="block") == 0
    release = threading.Timer(0.1, lambda: pool.release(slot=0, reader=0))
    release.start()
    assert pool.acquire(readers=(0,), on_full="block", timeout_s=5) == 0
    assert pool.acquire(readers=(0,), on_full="block", timeout_s=0.05) is None
    stats = pool.stats()
    assert (stats.acquired, stats.blocked, stats.dropped) == (2, 2, 1)
    pool.close()


def test_an_idle_outbox_posts_small_slot_bodies_on_the_callers_thread_and_never_blocks_there() -> None:
    with pooled_pair(num_slots=1, limits=ChannelLimits(on_full="block")) as (outbox, inbox, pool):
        payload = np.ones(MiB // 4, np.uint8)
        assert outbox.send(message=Message(arrays={"x": payload}), tag={"i": 0})
        assert outbox.stats().sent == 1 and outbox.stats().via_slot == 1  # posted before send returned
        held = inbox.get(timeout_s=10)  # pins the only slot
        started = time.perf_counter()
        assert outbox.send(message=Message(arrays={"x": payload}), tag={"i": 1})
        assert time.perf_counter() - started < 0.5 and outbox.stats().sent == 1  # queued for the sender thread
        with pytest.raises(queue.Empty):
            inbox.get(timeout_s=0.2)
        del held
        assert inbox.get(timeout_s=10).tag == {"i": 1}
        assert outbox.flush(timeout_s=5) and outbox.stats().sent == 2


def test_messages_keep_their_order_across_direct_and_threaded_posts() -> None:
    with pooled_pair(num_slots=4, slot_bytes=2 * MiB) as (outbox, inbox, pool):
        sizes = [MiB // 2, 2 * MiB - 4096, 16, MiB // 2, 3 * MiB, MiB // 2] * 3  # slot, thread, inline, segment
        for i, size in enumerate(sizes):
            outbox.send(message=Message(arrays={"x": np.full(size, i % 251, np.uint8)}), tag={"i": i})
        got = []
        for _ in sizes:
            envelope = inbox.get(timeout_s=10)
            got.append(envelope.tag["i"])
            assert envelope.message.arrays["x"].size == sizes[envelope.tag["i"]]
            del envelope
        assert got == list(range(len(sizes)))


def test_direct_any_posts_every_body_of_an_idle_outbox_on_the_callers_thread() -> None:
    """A worker's Outbox: inline and segment bodies alike leave before ``send`` returns."""
    a, b = socket.socketpair()
    inbox = Inbox()
    inbox.add_source(source="peer", sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(), pid=os.getpid()))
    outbox = Outbox(sock=a, inline_max_bytes=1 << 10, direct_any=True)
    try:
        for i, size in enumerate((16, 4 * MiB)):  # inline, then a fresh segment
            assert outbox.send(message=Message(arrays={"x": np.full(size, i, np.uint8)}), tag={"i": i})
            assert outbox.stats().sent == i + 1
            envelope = inbox.get(timeout_s=10)
            assert envelope.tag == {"i": i} and envelope.message.arrays["x"].size == size
            del envelope
    finally:
        outbox.close(timeout_s=1.0)
        inbox.close()
        a.close()
