"""One body, many readers: a broadcast over reference-counted pool slots (weights read by many actors).

``Broadcaster.publish`` writes the message once into a slot flagged for every live destination and
posts one small header to each; every destination's Inbox decodes views of the same slot, and the
slot is free again only when the *last* reader dropped its views (one flag per reader, data/slots.py).
A destination whose socket breaks is marked dead and its flags are reclaimed at once, so a reader
killed mid-message never pins a slot and the other readers lose nothing.

Example::

    pool = SlotPool.create(name=new_segment_name(prefix=run_prefix()), num_slots=2, slot_bytes=8 << 20,
                           max_readers=len(actor_socks))
    caster = Broadcaster(socks=actor_socks, pool=pool)
    reached = caster.publish(message=model_to_message(model=model, version=7), tag={"version": 7})
    caster.close()
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from nimbus.data.codec import Message, encoded_size, frame_plan
from nimbus.data.frames import slot_header_frame
from nimbus.data.slots import OnFull, SlotPool, SlotsExhausted, write_or_release
from nimbus.data.transport import DEFAULT_MAX_FRAME_BYTES, peer_closed, send_frame

log = logging.getLogger(__name__)


class Broadcaster:
    """Synchronous broadcast to ``socks`` (destination i reads as pool reader i). The caller owns the
    sockets; the Broadcaster owns ``pool`` and unlinks it on ``close``."""

    def __init__(self, *, socks: list[socket.socket], pool: SlotPool, on_full: OnFull = "block",
                 block_timeout_s: float | None = None, compress_min_bytes: int | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if len(socks) > pool.max_readers:
            raise ValueError(f"{len(socks)} destinations but the pool has {pool.max_readers} reader flags")
        self._socks, self._pool = list(socks), pool
        self._alive = [True] * len(socks)
        self._on_full, self._block_timeout_s = on_full, block_timeout_s
        self._compress_min_bytes, self._max_frame_bytes = compress_min_bytes, max_frame_bytes
        self._lock = threading.Lock()

    @property
    def alive(self) -> tuple[int, ...]:
        return tuple(i for i, alive in enumerate(self._alive) if alive)

    def publish(self, *, message: Message, tag: dict[str, Any]) -> int:
        """Write ``message`` once, announce it to every live destination; returns how many got the header."""
        with self._lock:
            readers = self.alive
            if not readers:
                return 0
            plan = frame_plan(message)
            if encoded_size(message, plan=plan) > self._pool.slot_bytes:
                raise ValueError(f"message of {encoded_size(message, plan=plan)} bytes does not fit a slot of "
                                 f"{self._pool.slot_bytes} bytes")
            slot, flagged = self._acquire(readers=readers)
            readers = self.alive
            for reader in set(flagged) - set(readers):  # died while we waited: its flag would pin the slot
                self._pool.release(slot=slot, reader=reader)
            if slot is None:
                raise SlotsExhausted(f"no free slot in {self._pool.name}: a reader still holds every one")
            nbytes, compressed = write_or_release(pool=self._pool, slot=slot, readers=readers, message=message,
                                                  plan=plan, compress_min_bytes=self._compress_min_bytes)
            return sum(self._announce(reader=reader, slot=slot, tag=tag, nbytes=nbytes, compressed=compressed)
                       for reader in readers)

    def _acquire(self, *, readers: tuple[int, ...]) -> tuple[int | None, tuple[int, ...]]:
        """(a slot, the readers it is flagged for); while waiting, readers whose socket closed are reclaimed."""
        slot = self._pool.try_acquire(readers=readers)
        if slot is not None:
            return slot, readers
        self._reap()
        live = self.alive
        while live:
            slot = self._pool.acquire(readers=live, on_full=self._on_full, timeout_s=self._block_timeout_s,
                                      abort=self._reap)
            if slot is not None or self.alive == live:
                return slot, live
            live = self.alive  # a reader died while we waited: its slots are free now, try again
        return None, ()

    def _reap(self) -> bool:
        """Mark destinations whose peer closed as dead and reclaim their slots; True if any was found."""
        found = False
        for reader in self.alive:
            if peer_closed(sock=self._socks[reader]):
                self._mark_dead(reader=reader, reason="peer closed")
                found = True
        return found

    def _mark_dead(self, *, reader: int, reason: str) -> None:
        self._alive[reader] = False
        reclaimed = self._pool.reclaim_reader(reader=reader)
        log.warning("broadcast: destination %d is gone (%s); reclaimed %d slot(s)", reader, reason, reclaimed)

    def _announce(self, *, reader: int, slot: int, tag: dict[str, Any], nbytes: int, compressed: bool) -> bool:
        frame = slot_header_frame(tag=tag, pool=self._pool.name, slot=slot, reader=reader, nbytes=nbytes,
                                  compressed=compressed)
        try:
            send_frame(sock=self._socks[reader], frame=frame, max_frame_bytes=self._max_frame_bytes)
            return True
        except OSError as exc:
            self._mark_dead(reader=reader, reason=str(exc))
            return False

    def close(self) -> None:
        self._pool.close(unlink=True)
