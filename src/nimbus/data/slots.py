"""Slot pools: pre-allocated, pre-touched shared-memory slots for channel bodies (zero-copy receive).

A fresh segment per message pays shm_open + ftruncate + mmap + the first touch of every page
(~1.5 GB/s here, against ~20 GB/s for a warm copy). A ``SlotPool`` pays that once: the *sender*
creates one segment of ``num_slots`` slots of ``slot_bytes``, writes every page at creation, and from
then on moves only slot indices (TorchBeast's free/full queues: the data plane moves slot ids and headers, not
payloads). Layout::

    head (magic "NSLT", version, num_slots, max_readers, slot_bytes, data_offset)
    flags  uint8[num_slots, max_readers]   1 = reader r still holds slot s
    data   num_slots × slot_bytes          (page aligned)

Reference counting without cross-process atomics: every (slot, reader) flag byte has exactly one
writer at a time. The sender sets the flags of every reader it announces a slot to (a broadcast of
weights to k actors sets k flags) *before* posting the headers; each reader clears its own flag when
it is done; the slot is free when its row is all zero. A receiver reads a slot through a
``PoolReader``: the arrays it decodes are numpy views of one root array over the slot, and the flag
is cleared by a ``weakref.finalize`` on that root, i.e. when the last view (or tensor made with
``torch.from_numpy``) dies. A reader that dies holding slots is reclaimed by the sender
(``reclaim_reader``) when its socket breaks. (x86 is TSO: the receiver's loads from the slot are
ordered before its flag store, so the sender never overwrites data still being read.)

Back-pressure (P13): ``acquire`` with no free slot either blocks (polling with back-off, up to
``timeout_s``) or drops; both are counted in ``stats()``.

Example::

    pool = SlotPool.create(name=segment_name(kind="pool"), num_slots=4, slot_bytes=1 << 20)
    slot = pool.acquire(readers=(0,), on_full="block")
    n = encode_into(message, pool.view(slot=slot))          # one copy, into warm pages
    reader = PoolReader.attach(name=pool.name)              # receiver side, once per pool
    root = reader.lease(slot=slot, reader=0, nbytes=n)      # uint8 view; the flag clears when it dies
    msg = decode(root)                                      # arrays are views of root
    del msg, root                                           # slot free again
"""

from __future__ import annotations

import mmap
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from nimbus.data.codec import FramePlan, Message, compress, decode, encode_into, worth_compressing
from nimbus.data.shm import Segment
from nimbus.errors import CodecError

OnFull = Literal["block", "drop"]
POOL_MAGIC = b"NSLT"
POOL_VERSION = 1
_HEAD = struct.Struct("<4sIIIQQ")
PAGE = mmap.PAGESIZE


def _round_up(value: int, *, to: int) -> int:
    return -(-value // to) * to


@dataclass(frozen=True)
class SlotStats:
    """Counters of one pool (sender side). ``blocked``: acquires that had to wait; ``dropped``: gave up."""

    num_slots: int
    slot_bytes: int
    busy_slots: int
    acquired: int
    blocked: int
    blocked_s: float
    dropped: int
    reclaimed: int


class SlotsExhausted(CodecError):
    """No free slot (on_full="drop", or "block" past its timeout): the message was not sent."""


class _PoolMap:
    """The mapped pool segment with its head, flags and data views (shared by SlotPool and PoolReader)."""

    def __init__(self, *, segment: Segment) -> None:
        magic, version, num_slots, max_readers, slot_bytes, data_offset = _HEAD.unpack_from(segment.buffer, 0)
        if magic != POOL_MAGIC or version != POOL_VERSION:
            raise CodecError(f"segment {segment.name!r} is not a nimbus slot pool (v{POOL_VERSION})")
        if data_offset + num_slots * slot_bytes > segment.size_bytes:
            raise CodecError(f"slot pool {segment.name!r} is smaller than its head claims")
        self.segment, self.name = segment, segment.name
        self.num_slots, self.max_readers, self.slot_bytes = num_slots, max_readers, slot_bytes
        self.data_offset = data_offset
        self.flags = np.ndarray((num_slots, max_readers), np.uint8, buffer=segment.buffer, offset=_HEAD.size)
        self.raw_flags = segment.buffer[_HEAD.size:_HEAD.size + num_slots * max_readers]  # bytes ops: faster than numpy
        self.free_row = bytes(max_readers)
        self.data = np.ndarray((num_slots * slot_bytes,), np.uint8, buffer=segment.buffer, offset=data_offset)


class SlotPool:
    """Sender side: owns the segment, hands out free slots, unlinks the segment on ``close``."""

    def __init__(self, *, pool: _PoolMap) -> None:
        """Internal: use ``SlotPool.create``."""
        self._pool = pool
        self._next = 0
        self._lock = threading.Lock()
        self._counts = {"acquired": 0, "blocked": 0, "dropped": 0, "reclaimed": 0}
        self._blocked_s = 0.0

    @classmethod
    def create(cls, *, name: str, num_slots: int, slot_bytes: int, max_readers: int = 1) -> SlotPool:
        if num_slots < 1 or slot_bytes < 1 or not 1 <= max_readers <= 255:
            raise ValueError(f"a slot pool needs num_slots ≥ 1, slot_bytes ≥ 1 and 1 ≤ max_readers ≤ 255, "
                             f"got {num_slots}, {slot_bytes}, {max_readers}")
        slot_bytes = _round_up(slot_bytes, to=PAGE)
        data_offset = _round_up(_HEAD.size + num_slots * max_readers, to=PAGE)
        segment = Segment.create(name=name, size_bytes=data_offset + num_slots * slot_bytes, populate=True)
        try:
            np.frombuffer(segment.buffer, np.uint8)[:] = 0  # write every page now: later copies run warm
            _HEAD.pack_into(segment.buffer, 0, POOL_MAGIC, POOL_VERSION, num_slots, max_readers, slot_bytes,
                            data_offset)
            return cls(pool=_PoolMap(segment=segment))
        except BaseException:
            segment.close()
            segment.unlink()
            raise

    @property
    def name(self) -> str:
        return self._pool.name

    @property
    def slot_bytes(self) -> int:
        return self._pool.slot_bytes

    @property
    def max_readers(self) -> int:
        return self._pool.max_readers

    def view(self, *, slot: int) -> memoryview:
        """The writable bytes of ``slot`` (write the body here, then announce it)."""
        start = slot * self._pool.slot_bytes
        return memoryview(self._pool.data[start:start + self._pool.slot_bytes])

    def acquire(self, *, readers: tuple[int, ...], on_full: OnFull, timeout_s: float | None = None,
                abort: Callable[[], bool] | None = None) -> int | None:
        """A free slot, already flagged as held by ``readers``; None when none frees up (counted).

        While blocked, ``abort()`` is asked at every back-off step (e.g. "is the reader still alive?");
        True ends the wait with None.
        """
        if not readers or any(not 0 <= r < self._pool.max_readers for r in readers):
            raise ValueError(f"readers {readers} outside [0, {self._pool.max_readers})")
        slot = self.try_acquire(readers=readers, count=False)
        if slot is not None or on_full == "drop":
            return self._count(slot)
        started, pause = time.perf_counter(), 20e-6
        deadline = None if timeout_s is None else started + timeout_s
        aborted = False
        while slot is None and (deadline is None or time.perf_counter() < deadline):
            if abort is not None and abort():
                aborted = True
                break
            time.sleep(pause)
            pause = min(pause * 2, 2e-3)
            slot = self.try_acquire(readers=readers, count=False)
        with self._lock:
            self._counts["blocked"] += 1
            self._blocked_s += time.perf_counter() - started
        return None if aborted else self._count(slot)

    def _count(self, slot: int | None) -> int | None:
        with self._lock:
            self._counts["acquired" if slot is not None else "dropped"] += 1
        return slot

    def try_acquire(self, *, readers: tuple[int, ...], count: bool = True) -> int | None:
        """A free slot flagged for ``readers``, or None at once (not counted as a drop)."""
        slot = self._scan(readers=readers)
        if slot is not None and count:
            self._count(slot)
        return slot

    def _scan(self, *, readers: tuple[int, ...]) -> int | None:
        pool = self._pool
        with self._lock:
            for i in range(pool.num_slots):  # round robin from the slot after the last one handed out
                slot = (self._next + i) % pool.num_slots
                if self._is_free(slot):
                    for reader in readers:
                        pool.raw_flags[slot * pool.max_readers + reader] = 1
                    self._next = (slot + 1) % pool.num_slots
                    return slot
            return None

    def has_free_slot(self) -> bool:
        """Is a slot free right now? (It stays free until this side acquires it: readers only free slots.)"""
        return any(self._is_free(slot) for slot in range(self._pool.num_slots))

    def _is_free(self, slot: int) -> bool:
        """No reader holds ``slot`` (its row of flags is all zero)."""
        pool, width = self._pool, self._pool.max_readers
        return pool.raw_flags[slot * width:(slot + 1) * width] == pool.free_row

    def release(self, *, slot: int, reader: int) -> None:
        """Clear one flag (a header that could not be posted, or a reader that will never read it)."""
        self._pool.flags[slot, reader] = 0

    def reclaim_reader(self, *, reader: int) -> int:
        """Release every slot ``reader`` holds (it died or disconnected); returns how many."""
        with self._lock:
            held = int(np.count_nonzero(self._pool.flags[:, reader]))
            self._pool.flags[:, reader] = 0
            self._counts["reclaimed"] += held
        return held

    def busy(self) -> int:
        return int(np.count_nonzero(self._pool.flags.any(axis=1)))

    def stats(self) -> SlotStats:
        with self._lock:
            return SlotStats(num_slots=self._pool.num_slots, slot_bytes=self._pool.slot_bytes, busy_slots=self.busy(),
                             blocked_s=self._blocked_s, **self._counts)

    def close(self, *, unlink: bool = True) -> None:
        """Unmap (the mapping survives while views exist) and, by default, unlink the segment."""
        segment = self._pool.segment
        if unlink:
            segment.unlink()
        segment.close()


class PoolReader:
    """Receiver side of one pool: hands out slot leases that release themselves when their views die."""

    def __init__(self, *, pool: _PoolMap) -> None:
        self._pool = pool

    @classmethod
    def attach(cls, *, name: str) -> PoolReader:
        """Map an existing pool; page tables are populated now (MAP_POPULATE), not on first read."""
        segment = Segment.attach(name=name, populate=True)
        try:
            return cls(pool=_PoolMap(segment=segment))
        except BaseException:
            segment.close()
            raise

    @property
    def name(self) -> str:
        return self._pool.name

    def lease(self, *, slot: int, reader: int, nbytes: int) -> np.ndarray:
        """A read-only uint8 array over the first ``nbytes`` of ``slot``; the slot's flag for ``reader``
        clears when this array and every view made from it are gone."""
        pool = self._pool
        if not (0 <= slot < pool.num_slots and 0 <= reader < pool.max_readers and 0 <= nbytes <= pool.slot_bytes):
            raise CodecError(f"slot {slot} / reader {reader} / {nbytes} bytes is outside pool {pool.name!r} "
                             f"({pool.num_slots} slots × {pool.slot_bytes} bytes, {pool.max_readers} readers)")
        start = pool.data_offset + slot * pool.slot_bytes
        # np.frombuffer over a memoryview: views of ``root`` keep ``root`` itself as their base (numpy stops
        # collapsing bases at a non-array), so the finalizer runs only when the last view is gone.
        root = np.frombuffer(pool.segment.buffer[start:start + nbytes], dtype=np.uint8)
        root.flags.writeable = False
        weakref.finalize(root, _clear, pool.flags, slot, reader)
        return root

    def close(self) -> None:
        self._pool.segment.close()


def _clear(flags: np.ndarray, slot: int, reader: int) -> None:
    flags[slot, reader] = 0


def write_message(*, pool: SlotPool, slot: int, message: Message, plan: FramePlan | None = None,
                  compress_min_bytes: int | None = None) -> tuple[int, bool]:
    """Encode ``message`` into ``slot`` (one copy); LZ4 in place when the frame is at least
    ``compress_min_bytes`` and compression shrinks it. Returns (bytes used, compressed)."""
    view = pool.view(slot=slot)
    used = encode_into(message, view, plan=plan)
    if compress_min_bytes is None or used < compress_min_bytes or not worth_compressing(view[:used]):
        return used, False
    packed = compress(view[:used])
    if len(packed) >= used:
        return used, False
    view[:len(packed)] = packed
    return len(packed), True


def write_or_release(*, pool: SlotPool, slot: int, readers: Iterable[int], message: Message, plan: FramePlan | None,
                     compress_min_bytes: int | None) -> tuple[int, bool]:
    """``write_message``; when it fails, ``slot`` is released for each of ``readers`` before the error goes on (their
    flags would otherwise pin a slot nobody will be told about)."""
    try:
        return write_message(pool=pool, slot=slot, message=message, plan=plan, compress_min_bytes=compress_min_bytes)
    except BaseException:
        for reader in readers:
            pool.release(slot=slot, reader=reader)
        raise


def read_message(*, reader: PoolReader, slot: int, reader_index: int, nbytes: int, compressed: bool,
                 max_decompressed_bytes: int | None = None) -> Message:
    """Decode a slot's body: views of a lease (zero-copy), or a private copy when it was compressed
    (the lease then dies here, so the slot is free again at once)."""
    root = reader.lease(slot=slot, reader=reader_index, nbytes=nbytes)
    if not compressed:
        return decode(root)
    message = decode(root, max_decompressed_bytes=max_decompressed_bytes)
    del root  # the last reference: its finalizer releases the slot now
    return message
