"""The Channel (XingTian push): an Outbox moves bodies into shared memory, an Inbox pulls them out.

``Outbox.send(message=..., tag=...)`` returns at once; the Outbox's sender thread places the body
(data/frames.py: inline under ``inline_max_bytes``; else into a free slot of the Outbox's pre-touched
``SlotPool`` when it has one and the body fits — one copy, zero-copy receive; else into a fresh
segment) and posts only a small header frame on the socket. LZ4 applies to frames of at least
``compress_min_bytes`` when it makes them smaller.

The Inbox's receiver thread (data/inbox.py; one ``selectors`` loop over every source socket) reads each header and
maps the body: a fresh segment is *unlinked at once* (every announced segment is unlinked on
arrival, consumed or not); a slot body is decoded as views of the slot, which goes back to the
sender when the last view dies (data/slots.py). The Envelope goes to ``on_message`` or to the local
queue before any consumer asks. A source that ends has its prefix swept (segments it created but
never announced, and its pool). A dead driver's leftovers are the janitor's (runtime/janitor.py).

Bounds (P13, docs/reliability.md): a message over ``ChannelLimits.max_message_bytes`` is refused by
``send`` with ``MessageTooLarge`` before anything is queued; the Outbox's queue and the pool's slots
are bounded, and the Inbox's local queue (``max_pending``); when one is full the producer blocks or
the message is dropped, per ``on_full``, and either is counted in ``stats()``.

Example::

    a, b = socket.socketpair()
    inbox = Inbox(max_pending=64)
    inbox.add_source(source="w1", sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(), pid=os.getpid()))
    pool = SlotPool.create(name=new_segment_name(prefix=run_prefix()), num_slots=4, slot_bytes=16 << 20)
    outbox = Outbox(sock=a, pool=pool, limits=ChannelLimits(max_message_bytes=16 << 20, on_full="block"))
    outbox.send(message=Message(arrays={"obs": obs}), tag={"round": 3})
    envelope = inbox.get(timeout_s=5.0)       # Envelope(source="w1", tag={"round": 3}, message=..., slot=0)
    outbox.close(); inbox.close()
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nimbus.data.codec import DEFAULT_COMPRESS_MIN_BYTES, Message, encoded_size, frame_plan
from nimbus.data.frames import (
    DEFAULT_INLINE_MAX_BYTES,
    Body,
    Envelope,
    body_segment_prefix,
    discard_body,
    header_frame,
    new_segment_name,
    open_frame,
    prepare_body,
    slot_header_frame,
)
from nimbus.data.inbox import Inbox, InboxStats
from nimbus.data.shm import run_prefix
from nimbus.data.slots import OnFull, SlotPool, SlotsExhausted, SlotStats, write_or_release
from nimbus.data.transport import DEFAULT_MAX_FRAME_BYTES, peer_closed, send_frames
from nimbus.errors import CodecError

log = logging.getLogger(__name__)
_BATCH_BYTES = 1 << 20  # post the headers of queued bodies together until this many body bytes wait
DEFAULT_DIRECT_MAX_BYTES = 1 << 20  # an idle Outbox posts bodies up to this size on the caller's thread
__all__ = ["Body", "ChannelLimits", "DEFAULT_INLINE_MAX_BYTES", "Envelope", "Inbox", "InboxStats", "MessageTooLarge",
           "Outbox", "OutboxStats", "body_segment_prefix", "discard_body", "header_frame", "new_segment_name",
           "open_frame", "prepare_body"]


class MessageTooLarge(CodecError):
    """A message over the channel's ``max_message_bytes``: refused by ``send``, nothing was queued."""


@dataclass(frozen=True)
class ChannelLimits:
    """Bounds of one Outbox. ``on_full``: what a full queue or pool does to the producer (block or drop);
    a block longer than ``block_timeout_s`` (None: no limit) turns into a drop."""

    max_message_bytes: int = 1 << 30
    max_queued_messages: int | None = None
    on_full: OnFull = "block"
    block_timeout_s: float | None = None


@dataclass(frozen=True)
class OutboxStats:
    sent: int
    via_slot: int
    failed: int
    dropped_full: int      # queue full or no free slot (on_full="drop", or a block that timed out)
    blocked: int           # sends that waited for room in the queue
    blocked_s: float
    slots: SlotStats | None


def payload_bytes(message: Message) -> int:
    """The bytes of ``message``'s arrays (what ``max_message_bytes`` bounds)."""
    return sum(int(np.asarray(array).nbytes) for array in message.arrays.values())


class Outbox:
    """Sender side: ``send`` returns at once; a sender thread places bodies and posts headers in order.

    The socket stays the caller's (the Outbox never closes it); ``pool`` becomes the Outbox's (unlinked
    by ``close``). Arrays handed to ``send`` must not be modified until ``flush`` returns: the sender
    thread reads them without copying first.
    """

    def __init__(self, *, sock: socket.socket, prefix: str | None = None,
                 inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES,
                 compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 on_error: Callable[[dict[str, Any], BaseException], None] | None = None,
                 pool: SlotPool | None = None, reader: int = 0, limits: ChannelLimits = ChannelLimits(),
                 direct_max_bytes: int = DEFAULT_DIRECT_MAX_BYTES, direct_any: bool = False) -> None:
        if inline_max_bytes > max_frame_bytes // 2:
            raise ValueError(f"inline_max_bytes={inline_max_bytes} must be at most half of max_frame_bytes")
        self._sock, self._prefix = sock, prefix if prefix is not None else run_prefix()
        self._inline_max_bytes, self._compress_min_bytes = inline_max_bytes, compress_min_bytes
        self._max_frame_bytes, self._on_error = max_frame_bytes, on_error
        self._pool, self._reader, self._limits = pool, reader, limits
        self._direct_max_bytes, self._direct_any = direct_max_bytes, direct_any
        self._posting = False  # a post is under way (sender thread or a direct send): posts never overlap
        self._queue: deque[tuple[Message, dict[str, Any], Any] | None] = deque()  # (message, tag, plan or None)
        self._cond = threading.Condition()
        self._unfinished, self._broken = 0, False
        self._counts = {"sent": 0, "via_slot": 0, "failed": 0, "dropped_full": 0, "blocked": 0}
        self._blocked_s = 0.0
        self._batch: list[tuple[bytes, dict[str, Any], Body | None, int | None]] = []
        self._batch_bytes = 0
        self._thread = threading.Thread(target=self._run, name="nimbus-outbox", daemon=True)
        self._thread.start()

    def send(self, *, message: Message, tag: dict[str, Any]) -> bool:
        """Queue ``message``; returns at once (or, with a full queue and on_full="block", once there is room).

        When nothing is queued or being posted, a slot is free and the arrays total at most
        ``direct_max_bytes``, the body is placed and its header posted on the caller's thread instead
        (one copy of at most 1 MiB by default: cheaper than waking the sender thread, and the receiver
        hears of it sooner); it never waits there. False when it was dropped (full queue, or a broken
        channel); raises MessageTooLarge, queuing nothing, when it is over the limit.
        """
        size = payload_bytes(message)
        if size > self._limits.max_message_bytes:
            raise MessageTooLarge(f"message {tag} has {size} bytes of arrays, over the channel limit of "
                                  f"{self._limits.max_message_bytes} bytes (channel.max_message_bytes); "
                                  "split it or raise the limit")
        with self._cond:
            if not self._room():
                return False
            self._unfinished += 1
            direct = self._direct_candidate(size=size)
            if direct:
                self._posting = True
            else:
                self._queue.append((message, tag, None))
                self._cond.notify_all()
        if not direct:
            return True
        queued = False
        try:  # only the poster takes slots, so a slot free now stays free until _post takes it
            plan = frame_plan(message)
            if self._direct_any or (self._pool.has_free_slot() and self._fits_slot(message=message, plan=plan)):
                return self._post(message=message, tag=tag, more=False, plan=plan)
            with self._cond:  # no free slot (or not a slot body): the sender thread waits for one instead
                self._queue.append((message, tag, plan))
                queued = True
            return True
        finally:
            with self._cond:
                self._posting = False
                self._unfinished -= 0 if queued else 1
                self._cond.notify_all()

    def _direct_candidate(self, *, size: int) -> bool:
        """Post on the caller's thread? Only small slot bodies of an idle Outbox: their ~100-byte headers
        never fill the socket (at most one per slot is outstanding), so the caller cannot block on it.
        With ``direct_any`` every body of an idle Outbox (a worker's results: its serving thread has
        nothing else to do until the result is out, and the driver always reads)."""
        if self._queue or self._posting:
            return False
        if self._direct_any:
            return True
        return self._pool is not None and size <= min(self._direct_max_bytes, self._pool.slot_bytes)

    def _fits_slot(self, *, message: Message, plan: Any) -> bool:
        return self._inline_max_bytes <= encoded_size(message, plan=plan) <= self._pool.slot_bytes

    def _room(self) -> bool:
        """Wait (lock held) for room in a bounded queue per on_full; False (counted) when dropped."""
        bound = self._limits.max_queued_messages
        if bound is None or len(self._queue) < bound:
            return True
        if self._limits.on_full == "block":
            started = time.perf_counter()
            self._counts["blocked"] += 1
            room = self._cond.wait_for(lambda: len(self._queue) < bound, timeout=self._limits.block_timeout_s)
            self._blocked_s += time.perf_counter() - started
            if room:
                return True
        self._counts["dropped_full"] += 1
        return False

    def flush(self, *, timeout_s: float | None = None) -> bool:
        """Wait until everything queued was posted (or dropped); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._unfinished == 0, timeout=timeout_s)

    def close(self, *, timeout_s: float = 5.0) -> None:
        """Flush, stop the sender thread, then unlink the pool once the receiver gave every slot back
        (or ``timeout_s`` passed, or the receiver is gone): a receiver maps a pool by name on its first
        header, so unlinking earlier could strand announced bodies. Receivers' views stay valid."""
        deadline = time.monotonic() + timeout_s
        self.flush(timeout_s=timeout_s)
        with self._cond:
            self._queue.append(None)
            self._cond.notify_all()
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._pool is not None:
            while self._pool.busy() and time.monotonic() < deadline and not peer_closed(sock=self._sock):
                time.sleep(0.005)
            self._pool.close(unlink=True)

    def stats(self) -> OutboxStats:
        with self._cond:
            return OutboxStats(blocked_s=self._blocked_s, slots=self._pool.stats() if self._pool else None,
                               **self._counts)

    def _run(self) -> None:
        """Place queued bodies and post their headers; headers of small bodies queued together go in one
        ``sendall`` (fewer syscalls and receiver wake-ups), up to ``_BATCH_BYTES`` of bodies per batch."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) and not self._posting)
                item = self._queue.popleft()
                more = bool(self._queue) and self._queue[0] is not None
                self._posting = item is not None
                self._cond.notify_all()  # room for a blocked send
            if item is None:
                self._flush_batch()
                return
            try:
                self._post(message=item[0], tag=item[1], more=more, plan=item[2])
            finally:
                with self._cond:
                    self._posting = False
                    self._unfinished -= 1
                    self._cond.notify_all()

    def _post(self, *, message: Message, tag: dict[str, Any], more: bool, plan: Any = None) -> bool:
        """Place one body and batch its header (posted now unless ``more`` follow); False when it failed."""
        if self._broken:
            return False
        body: Body | None = None
        slot: int | None = None
        try:
            plan = plan if plan is not None else frame_plan(message)
            size = encoded_size(message, plan=plan)
            if self._pool is not None and self._inline_max_bytes <= size <= self._pool.slot_bytes:
                slot, frame = self._place_in_slot(message=message, tag=tag, plan=plan)
            else:
                body = prepare_body(message=message, prefix=self._prefix, inline_max_bytes=self._inline_max_bytes,
                                    compress_min_bytes=self._compress_min_bytes)
                frame = header_frame(tag=tag, body=body)
        except Exception as exc:  # noqa: BLE001 - reported through on_error, never lost silently
            self._fail(tag=tag, exc=exc, body=body, slot=slot)
            return False
        self._batch.append((frame, tag, body, slot))
        self._batch_bytes += size
        if not more or self._batch_bytes >= _BATCH_BYTES or len(self._batch) >= 64:
            return self._flush_batch()
        return True

    def _flush_batch(self) -> bool:
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        if not batch:
            return True
        try:
            send_frames(sock=self._sock, frames=[entry[0] for entry in batch], max_frame_bytes=self._max_frame_bytes)
        except Exception as exc:  # noqa: BLE001 - every message of the batch is reported
            for _, tag, body, slot in batch:
                self._fail(tag=tag, exc=exc, body=body, slot=slot)
            return False
        with self._cond:
            self._counts["sent"] += len(batch)
            self._counts["via_slot"] += sum(entry[3] is not None for entry in batch)
        return True

    def _place_in_slot(self, *, message: Message, tag: dict[str, Any], plan: Any) -> tuple[int, bytes]:
        limits = self._limits
        slot = self._pool.try_acquire(readers=(self._reader,))
        if slot is None:
            self._flush_batch()  # slots held by headers not yet posted must reach the receiver before we wait
            slot = self._pool.acquire(readers=(self._reader,), on_full=limits.on_full,
                                      timeout_s=limits.block_timeout_s, abort=lambda: peer_closed(sock=self._sock))
        if slot is None and peer_closed(sock=self._sock):
            raise BrokenPipeError(f"the receiver of pool {self._pool.name} is gone")
        if slot is None:
            raise SlotsExhausted(f"no free slot in pool {self._pool.name} (on_full={limits.on_full!r})")
        nbytes, compressed = write_or_release(pool=self._pool, slot=slot, readers=(self._reader,), message=message,
                                              plan=plan, compress_min_bytes=self._compress_min_bytes)
        return slot, slot_header_frame(tag=tag, pool=self._pool.name, slot=slot, reader=self._reader,
                                       nbytes=nbytes, compressed=compressed)

    def _fail(self, *, tag: dict[str, Any], exc: Exception, body: Body | None, slot: int | None) -> None:
        if body is not None:
            discard_body(body=body)
        if slot is not None:
            self._pool.release(slot=slot, reader=self._reader)
        self._broken = isinstance(exc, OSError)
        with self._cond:
            self._counts["dropped_full" if isinstance(exc, SlotsExhausted) else "failed"] += 1
        log.warning("outbox: dropped message %s: %s: %s", tag, type(exc).__name__, exc)
        if self._on_error is not None:
            self._on_error(tag, exc)
