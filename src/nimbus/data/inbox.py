"""The Channel's receiving side (see data/channel.py): one thread pulls every source's bodies into local
memory as they arrive — fresh segments unlinked at once, pool slots leased as views (data/slots.py) —
and hands each Envelope to a callback or to a bounded local queue.
"""

from __future__ import annotations

import logging
import queue
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nimbus.data.frames import Envelope, open_frame
from nimbus.data.shm import sweep
from nimbus.data.slots import OnFull, PoolReader
from nimbus.data.transport import DEFAULT_MAX_FRAME_BYTES, FrameReader
from nimbus.errors import CodecError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InboxStats:
    received: int
    dropped_full: int      # envelopes dropped because the local queue was full (on_full="drop")
    blocked: int           # envelopes that waited for room (on_full="block"): the sources were not read meanwhile
    blocked_s: float
    pending: int



@dataclass
class _Source:
    source: str
    sock: socket.socket
    segment_prefix: str | None
    close_socket: bool
    reader: FrameReader = field(default_factory=FrameReader)
    pools: dict[str, PoolReader] = field(default_factory=dict)


class Inbox:
    """Receiver side: one thread pulls every source's bodies into local memory as they arrive.

    With ``on_message`` each Envelope is handed to the callback (on the receiver thread: keep it
    short); without it envelopes queue up for ``get`` — at most ``max_pending`` of them (None: no
    bound); when full, ``on_full="block"`` stops reading the sources until there is room (their
    senders then block on the socket), ``"drop"`` drops the envelope. ``on_close(source, error)``
    runs when a source hits EOF or sends a bad frame (error is the CodecError; the source is dropped:
    P11). Compressed bodies that would decompress to more than ``max_message_bytes`` are refused.
    ``on_error(error)`` hears of an exception ``on_message`` raised (a ledger that cannot be written: a full
    disk): the owner must fail what waits on that message, since nothing else will deliver it; without
    ``on_error`` the exception is only logged.

    Example::

        inbox = Inbox(on_message=lambda envelope: results.put(envelope))
        inbox.add_source(source="w1", sock=sock, segment_prefix=body_segment_prefix(prefix=p, pid=pid))
        ...
        inbox.close()
    """

    def __init__(self, *, on_message: Callable[[Envelope], None] | None = None,
                 on_close: Callable[[str, BaseException | None], None] | None = None,
                 on_error: Callable[[BaseException], None] | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, max_pending: int | None = None,
                 on_full: OnFull = "block", max_message_bytes: int | None = None) -> None:
        self._on_message, self._on_close, self._max_frame_bytes = on_message, on_close, max_frame_bytes
        self._on_error = on_error
        self._on_full, self._max_message_bytes = on_full, max_message_bytes
        self._queue: queue.Queue[Envelope] = queue.Queue(maxsize=max_pending or 0)
        self._counts = {"received": 0, "dropped_full": 0, "blocked": 0}
        self._blocked_s = 0.0
        self._ops: deque[tuple[str, Any]] = deque()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._sources: dict[str, _Source] = {}
        self._closed = self._stopping = False
        self._thread = threading.Thread(target=self._run, name="nimbus-inbox", daemon=True)
        self._thread.start()

    def add_source(self, *, source: str, sock: socket.socket, segment_prefix: str | None = None,
                   close_socket: bool = True) -> None:
        """Start receiving from ``sock``; ``segment_prefix`` bounds (and on EOF sweeps) its segments."""
        reader = FrameReader(max_frame_bytes=self._max_frame_bytes)
        self._op("add", _Source(source=source, sock=sock, segment_prefix=segment_prefix,
                                close_socket=close_socket, reader=reader))

    def remove_source(self, *, source: str) -> None:
        """Stop receiving from ``source`` (no on_close callback); closes its socket if the Inbox owns it."""
        self._op("remove", source)

    def get(self, *, timeout_s: float | None = None) -> Envelope:
        """Next envelope (only when constructed without ``on_message``); raises queue.Empty on timeout."""
        return self._queue.get(timeout=timeout_s)

    def stats(self) -> InboxStats:
        return InboxStats(blocked_s=self._blocked_s, pending=self._queue.qsize(), **self._counts)

    def close(self) -> None:
        """Stop the receiver thread and drop every source."""
        if self._closed:
            return
        self._stopping = True
        self._op("stop", None)
        if threading.current_thread() is not self._thread:  # close() may come from an on_message callback
            self._thread.join(timeout=5.0)
        self._closed = True
        self._wake_w.close()

    def _op(self, kind: str, arg: Any) -> None:
        self._ops.append((kind, arg))
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        while True:
            for key, _ in self._selector.select():
                try:
                    if key.data is None:
                        if not self._apply_ops():
                            return
                    else:
                        self._read(key.data)
                except Exception:  # noqa: BLE001 - keep receiving from the other sources
                    log.exception("inbox: unexpected error while receiving")

    def _apply_ops(self) -> bool:
        try:
            self._wake_r.recv(1 << 12)
        except BlockingIOError:
            pass
        while self._ops:
            kind, arg = self._ops.popleft()
            if kind == "add" and arg.source in self._sources:
                log.error("inbox: a source named %r is already registered; ignoring the new one", arg.source)
                if arg.close_socket:
                    arg.sock.close()
            elif kind == "add":
                self._sources[arg.source] = arg
                self._selector.register(arg.sock, selectors.EVENT_READ, arg)
            elif kind == "remove" and arg in self._sources:
                self._drop(self._sources[arg], None, notify=False)
            elif kind == "stop":
                for src in list(self._sources.values()):
                    self._drop(src, None, notify=False)
                self._selector.close()
                self._wake_r.close()
                return False
        return True

    def _read(self, src: _Source) -> None:
        if self._sources.get(src.source) is not src:
            return  # dropped earlier in this select batch
        try:
            data, error = src.sock.recv(1 << 18), None
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            data, error = b"", exc
        try:
            for frame in src.reader.feed(data=data):
                self._deliver(src, frame)
        except CodecError as exc:
            log.error("inbox: source %r sent a bad frame, dropping it: %s", src.source, exc)
            data, error = b"", exc
        if not data:  # EOF, a socket error or a bad frame: the source is over
            self._drop(src, error, notify=True)

    def _deliver(self, src: _Source, frame: bytearray) -> None:
        try:
            envelope = open_frame(frame=frame, source=src.source, unlink_segment=True,
                                  allowed_prefix=src.segment_prefix, pools=src.pools,
                                  max_decompressed_bytes=self._max_message_bytes)
        except FileNotFoundError as exc:
            log.warning("inbox: a body from %r was already removed: %s", src.source, exc)
            return
        self._counts["received"] += 1
        if self._on_message is None:
            self._enqueue(envelope)
            return
        try:
            self._on_message(envelope)
        except Exception as exc:  # noqa: BLE001 - a consumer bug must not kill the receiver thread
            if self._on_error is None:
                log.exception("inbox: on_message failed for a message from %r", src.source)
                return
            log.debug("inbox: on_message failed for a message from %r", src.source, exc_info=True)
            self._on_error(exc)

    def _enqueue(self, envelope: Envelope) -> None:
        try:
            self._queue.put_nowait(envelope)
            return
        except queue.Full:
            if self._on_full == "drop":
                self._counts["dropped_full"] += 1
                return
        started = time.perf_counter()
        self._counts["blocked"] += 1
        while not self._stopping:
            try:
                self._queue.put(envelope, timeout=0.05)
                break
            except queue.Full:
                continue
        self._blocked_s += time.perf_counter() - started

    def _drop(self, src: _Source, error: BaseException | None, *, notify: bool) -> None:
        """Stop reading ``src``, sweep what it created but never announced, tell the owner if it ended."""
        try:
            self._selector.unregister(src.sock)
        except (KeyError, ValueError):
            pass
        self._sources.pop(src.source, None)
        for pool in src.pools.values():
            pool.close()  # the mapping outlives this while envelopes still hold views of it
        if src.segment_prefix is not None:
            sweep(prefix=src.segment_prefix)
        if notify and self._on_close is not None:
            try:
                self._on_close(src.source, error)
            except Exception:  # noqa: BLE001
                log.exception("inbox: on_close failed for %r", src.source)
        if src.close_socket:
            src.sock.close()
