"""The Channel (XingTian push): an Outbox moves bodies into shared memory, an Inbox pulls them out.

``Outbox.send(message=..., tag=...)`` returns at once; the Outbox's sender thread writes the body
into a fresh shared-memory segment with one copy (``codec.encode_into``; LZ4 first when the frame
is at least ``compress_min_bytes`` and compression shrinks it) and posts only a small header frame
(segment name, size, tag) on the socket. Bodies under ``inline_max_bytes`` ride in the header frame.

The Inbox's receiver thread (one ``selectors`` loop over every source socket) reads each header,
maps the segment, *unlinks it at once* and decodes the body as views over the mapping (zero-copy;
the pages are freed when the last array dies), then hands an ``Envelope`` to ``on_message`` or to
its local queue, before any consumer asks. So every announced segment is unlinked on arrival,
consumed or not. A segment whose sender died before announcing it is named
``<run prefix>chan_<sender pid>_<n>``: the Inbox sweeps a source's ``segment_prefix`` when the
source ends (and a header may only name segments under it, so a peer cannot make the receiver
unlink someone else's). A dead driver's leftovers are the janitor's (runtime/janitor.py).

Example::

    a, b = socket.socketpair()
    inbox = Inbox(on_message=None)
    inbox.add_source(source="w1", sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(), pid=os.getpid()))
    outbox = Outbox(sock=a)
    outbox.send(message=Message(arrays={"obs": obs}), tag={"round": 3})
    envelope = inbox.get(timeout_s=5.0)       # Envelope(source="w1", tag={"round": 3}, message=...)
    outbox.close(); inbox.close()
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import selectors
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from nimbus.data.codec import DEFAULT_COMPRESS_MIN_BYTES, Message, compress, decode, encode, encode_into, encoded_size
from nimbus.data.shm import Segment, run_prefix, sweep, unlink
from nimbus.errors import CodecError
from nimbus.runtime.transport import DEFAULT_MAX_FRAME_BYTES, FrameReader, send_frame

log = logging.getLogger(__name__)

SEGMENT_KIND = "chan"
DEFAULT_INLINE_MAX_BYTES = 64 << 10
_META = "nimbus_channel"
_names = itertools.count()  # next() on a count is atomic under the GIL


def body_segment_prefix(*, prefix: str, pid: int) -> str:
    """Prefix of every body segment that process ``pid`` creates under run prefix ``prefix``."""
    return f"{prefix}{SEGMENT_KIND}_{pid}_"


def _new_segment_name(*, prefix: str) -> str:
    return f"{body_segment_prefix(prefix=prefix, pid=os.getpid())}{next(_names)}"


@dataclass(frozen=True)
class Body:
    """A body made ready to announce: inline (small) or written into the segment ``segment``."""

    inline: Message | None
    segment: str | None
    nbytes: int
    compressed: bool


@dataclass(frozen=True)
class Envelope:
    """What an Inbox delivers: who sent it, the sender's tag, and the body (now in local memory)."""

    source: str
    tag: dict[str, Any]
    message: Message
    nbytes: int
    via_segment: bool
    compressed: bool


def _write_segment(*, prefix: str, size: int, fill: Callable[[memoryview], Any]) -> str:
    """Create a segment of ``size`` bytes, let ``fill`` write it, unmap it; unlinked again if fill fails."""
    segment = Segment.create(name=_new_segment_name(prefix=prefix), size_bytes=size)
    try:
        fill(segment.buffer)
    except BaseException:
        segment.unlink()
        raise
    finally:
        segment.close()
    return segment.name


def prepare_body(*, message: Message, prefix: str,
                 inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES,
                 compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES) -> Body:
    """Place a body: inline if small, else in a new segment (LZ4-compressed when that makes it smaller)."""
    size = encoded_size(message)
    if size < inline_max_bytes:
        return Body(inline=message, segment=None, nbytes=size, compressed=False)
    if compress_min_bytes is None or size < compress_min_bytes:  # one copy: encode straight into the segment
        name = _write_segment(prefix=prefix, size=size, fill=lambda out: encode_into(message, out))
        return Body(inline=None, segment=name, nbytes=size, compressed=False)
    frame = bytearray(size)
    encode_into(message, memoryview(frame))
    packed = compress(frame)
    data = packed if len(packed) < size else frame

    def copy(out: memoryview) -> None:
        out[:] = data

    name = _write_segment(prefix=prefix, size=len(data), fill=copy)
    return Body(inline=None, segment=name, nbytes=len(data), compressed=data is packed)


def discard_body(*, body: Body) -> None:
    """Remove a prepared body's segment (a body that will never be announced, or no longer needed)."""
    if body.segment is not None:
        unlink(name=body.segment)


def header_frame(*, tag: dict[str, Any], body: Body) -> bytes:
    """The small frame that announces ``body`` (and carries it when inline)."""
    meta = {"tag": tag, "segment": body.segment, "nbytes": body.nbytes, "compressed": body.compressed}
    if body.inline is None:
        return encode(Message(header={_META: meta}), compress_min_bytes=None)
    return encode(Message(header={_META: meta, "body": body.inline.header}, arrays=body.inline.arrays),
                  compress_min_bytes=None)


def _read_segment(*, name: str, unlink_segment: bool, compressed: bool) -> Message:
    segment = Segment.attach(name=name)
    if unlink_segment:
        segment.unlink()  # the mapping stays valid; the name is gone, so nothing can leak it
    message = decode(segment.buffer, copy=False)
    if compressed:
        segment.close()  # decompressed into private memory: the mapping is no longer needed
    return message  # otherwise the arrays are views that keep the mapping alive until they die


def open_frame(*, frame: bytes | bytearray, source: str, unlink_segment: bool,
               allowed_prefix: str | None = None) -> Envelope:
    """Decode a header frame and pull its body into local memory. Raises CodecError on a bad frame."""
    outer = decode(frame)
    meta = outer.header.get(_META)
    if not isinstance(meta, dict) or not isinstance(meta.get("tag"), dict):
        raise CodecError("frame is a codec frame but not a channel header")
    name = meta.get("segment")
    if name is None:
        message = Message(header=outer.header.get("body", {}), arrays=outer.arrays)
        return Envelope(source=source, tag=meta["tag"], message=message, nbytes=int(meta["nbytes"]),
                        via_segment=False, compressed=False)
    if not isinstance(name, str) or (allowed_prefix is not None and not name.startswith(allowed_prefix)):
        raise CodecError(f"source {source!r} named segment {name!r} outside its prefix {allowed_prefix!r}")
    compressed = bool(meta.get("compressed"))
    message = _read_segment(name=name, unlink_segment=unlink_segment, compressed=compressed)
    return Envelope(source=source, tag=meta["tag"], message=message, nbytes=int(meta["nbytes"]),
                    via_segment=True, compressed=compressed)


class Outbox:
    """Sender side: ``send`` returns at once; a sender thread places bodies and posts headers in order.

    The socket stays the caller's (the Outbox never closes it). Arrays handed to ``send`` must not be
    modified until ``flush`` returns: the sender thread reads them without copying first.

    Example::

        outbox = Outbox(sock=sock, inline_max_bytes=64 << 10, compress_min_bytes=1 << 20)
        outbox.send(message=Message(arrays={"obs": obs}), tag={"invocation_id": "ab12"})
        outbox.close(timeout_s=5.0)    # flushes what is queued, then stops the thread
    """

    def __init__(self, *, sock: socket.socket, prefix: str | None = None,
                 inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES,
                 compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 on_error: Callable[[dict[str, Any], BaseException], None] | None = None) -> None:
        if inline_max_bytes > max_frame_bytes // 2:
            raise ValueError(f"inline_max_bytes={inline_max_bytes} must be at most half of max_frame_bytes")
        self._sock, self._prefix = sock, prefix if prefix is not None else run_prefix()
        self._inline_max_bytes, self._compress_min_bytes = inline_max_bytes, compress_min_bytes
        self._max_frame_bytes, self._on_error = max_frame_bytes, on_error
        self._queue: deque[tuple[Message, dict[str, Any]] | None] = deque()
        self._cond = threading.Condition()
        self._unfinished, self._broken = 0, False
        self._thread = threading.Thread(target=self._run, name="nimbus-outbox", daemon=True)
        self._thread.start()

    def send(self, *, message: Message, tag: dict[str, Any]) -> None:
        """Queue ``message`` for the destination; returns at once."""
        with self._cond:
            self._queue.append((message, tag))
            self._unfinished += 1
            self._cond.notify_all()

    def flush(self, *, timeout_s: float | None = None) -> bool:
        """Wait until everything queued was posted (or dropped); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._unfinished == 0, timeout=timeout_s)

    def close(self, *, timeout_s: float = 5.0) -> None:
        """Flush, then stop the sender thread."""
        self.flush(timeout_s=timeout_s)
        with self._cond:
            self._queue.append(None)
            self._cond.notify_all()
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue))
                item = self._queue.popleft()
            if item is None:
                return
            try:
                self._post(message=item[0], tag=item[1])
            finally:
                with self._cond:
                    self._unfinished -= 1
                    self._cond.notify_all()

    def _post(self, *, message: Message, tag: dict[str, Any]) -> None:
        if self._broken:
            return
        body: Body | None = None
        try:
            body = prepare_body(message=message, prefix=self._prefix, inline_max_bytes=self._inline_max_bytes,
                                compress_min_bytes=self._compress_min_bytes)
            send_frame(sock=self._sock, frame=header_frame(tag=tag, body=body), max_frame_bytes=self._max_frame_bytes)
        except Exception as exc:  # noqa: BLE001 - reported through on_error, never lost silently
            if body is not None:
                discard_body(body=body)
            self._broken = isinstance(exc, OSError)
            log.warning("outbox: dropped message %s: %s: %s", tag, type(exc).__name__, exc)
            if self._on_error is not None:
                self._on_error(tag, exc)


@dataclass
class _Source:
    source: str
    sock: socket.socket
    segment_prefix: str | None
    close_socket: bool
    reader: FrameReader = field(default_factory=FrameReader)


class Inbox:
    """Receiver side: one thread pulls every source's bodies into local memory as they arrive.

    With ``on_message`` each Envelope is handed to the callback (on the receiver thread: keep it
    short); without it envelopes queue up for ``get``. ``on_close(source, error)`` runs when a
    source hits EOF or sends a bad frame (error is the CodecError; the source is dropped: P11).

    Example::

        inbox = Inbox(on_message=lambda envelope: results.put(envelope))
        inbox.add_source(source="w1", sock=sock, segment_prefix=body_segment_prefix(prefix=p, pid=pid))
        ...
        inbox.close()
    """

    def __init__(self, *, on_message: Callable[[Envelope], None] | None = None,
                 on_close: Callable[[str, BaseException | None], None] | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._on_message, self._on_close, self._max_frame_bytes = on_message, on_close, max_frame_bytes
        self._queue: queue.Queue[Envelope] = queue.Queue()
        self._ops: deque[tuple[str, Any]] = deque()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._sources: dict[str, _Source] = {}
        self._closed = False
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

    def close(self) -> None:
        """Stop the receiver thread and drop every source."""
        if self._closed:
            return
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
                                  allowed_prefix=src.segment_prefix)
        except FileNotFoundError as exc:
            log.warning("inbox: a body from %r was already removed: %s", src.source, exc)
            return
        if self._on_message is None:
            self._queue.put(envelope)
            return
        try:
            self._on_message(envelope)
        except Exception:  # noqa: BLE001 - a consumer bug must not kill the receiver thread
            log.exception("inbox: on_message failed for a message from %r", src.source)

    def _drop(self, src: _Source, error: BaseException | None, *, notify: bool) -> None:
        """Stop reading ``src``, sweep what it created but never announced, tell the owner if it ended."""
        try:
            self._selector.unregister(src.sock)
        except (KeyError, ValueError):
            pass
        self._sources.pop(src.source, None)
        if src.segment_prefix is not None:
            sweep(prefix=src.segment_prefix)
        if notify and self._on_close is not None:
            try:
                self._on_close(src.source, error)
            except Exception:  # noqa: BLE001
                log.exception("inbox: on_close failed for %r", src.source)
        if src.close_socket:
            src.sock.close()
