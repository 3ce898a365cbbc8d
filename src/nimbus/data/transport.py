"""Length-prefixed codec frames over a stream socket (driver <-> worker, Outbox -> Inbox).

On the wire every frame is ``u64 little-endian length | codec frame``. A receiver checks the length
against ``max_frame_bytes`` before it allocates anything, and checks the codec prefix (magic and
version) as soon as the first bytes arrive, so a peer that sends a pickle, garbage or an oversized
length gets a ``CodecError`` and its bytes are never interpreted as anything but data (P11: nothing
in nimbus unpickles). Large bodies do not travel here: the Channel puts them in shared memory and
sends only a header frame.

Example::

    a, b = socket.socketpair()
    send_frame(sock=a, frame=encode(Message(header={"x": 1})))
    assert decode(recv_frame(sock=b)).header == {"x": 1}
"""

from __future__ import annotations

import socket
import struct

from nimbus.data.codec import MAGIC, PREFIX, VERSION
from nimbus.errors import CodecError

LENGTH = struct.Struct("<Q")
DEFAULT_MAX_FRAME_BYTES = 64 << 20
_MIN_FRAME_BYTES = PREFIX.size + 8  # codec prefix + safetensors header length


def check_prefix(*, data: bytes | bytearray | memoryview) -> None:
    """Raise CodecError unless ``data`` starts like a codec frame (only the bytes present are checked)."""
    head = bytes(data[:len(MAGIC) + 1])
    if head[:len(MAGIC)] != MAGIC[:len(head)]:
        raise CodecError(f"not a nimbus frame (starts with {head!r}); refusing it")
    if len(head) > len(MAGIC) and head[len(MAGIC)] != VERSION:
        raise CodecError(f"frame version {head[len(MAGIC)]} is not supported (this nimbus reads {VERSION})")


def _check_length(*, length: int, max_frame_bytes: int) -> None:
    if length > max_frame_bytes:
        raise CodecError(f"frame of {length} bytes exceeds the limit of {max_frame_bytes} bytes")
    if length < _MIN_FRAME_BYTES:
        raise CodecError(f"frame of {length} bytes is too short to be a nimbus frame")


def send_frame(*, sock: socket.socket, frame: bytes | bytearray | memoryview,
               max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
    """Send one frame (blocking). Oversized frames are refused before anything is sent."""
    _check_length(length=len(frame), max_frame_bytes=max_frame_bytes)
    check_prefix(data=frame)
    if len(frame) <= 1 << 16:
        sock.sendall(LENGTH.pack(len(frame)) + bytes(frame))
    else:
        sock.sendall(LENGTH.pack(len(frame)))
        sock.sendall(frame)


def peer_closed(*, sock: socket.socket) -> bool:
    """True when the peer of ``sock`` has closed it (EOF or an error), without consuming any byte."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def send_frames(*, sock: socket.socket, frames: list[bytes], max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
    """Send several small frames with one ``sendall`` (each checked as ``send_frame`` does)."""
    parts = []
    for frame in frames:
        _check_length(length=len(frame), max_frame_bytes=max_frame_bytes)
        check_prefix(data=frame)
        parts += (LENGTH.pack(len(frame)), frame)
    sock.sendall(b"".join(parts))


def _recv_exact(*, sock: socket.socket, size: int) -> bytearray | None:
    """Exactly ``size`` bytes, or None on EOF before the first byte; EOF later is a truncated frame."""
    out = bytearray(size)
    view = memoryview(out)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0:
                return None
            raise CodecError(f"connection closed inside a frame ({got} of {size} bytes)")
        got += n
    return out


def recv_frame(*, sock: socket.socket, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytearray | None:
    """Receive one frame (blocking); None when the peer closed the connection between frames."""
    raw = _recv_exact(sock=sock, size=LENGTH.size)
    if raw is None:
        return None
    (length,) = LENGTH.unpack(raw)
    _check_length(length=length, max_frame_bytes=max_frame_bytes)
    head = _recv_exact(sock=sock, size=len(MAGIC) + 1)
    if head is None:
        raise CodecError("connection closed inside a frame")
    check_prefix(data=head)
    rest = _recv_exact(sock=sock, size=length - len(head))
    if rest is None:
        raise CodecError("connection closed inside a frame")
    return head + rest


class FrameReader:
    """Incremental parser for a non-blocking reader: ``feed(bytes)`` returns the complete frames.

    Example::

        reader = FrameReader()
        frames = reader.feed(data=sock.recv(1 << 18))
    """

    def __init__(self, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._need: int | None = None  # length of the frame being read, once its prefix arrived

    def feed(self, *, data: bytes) -> list[bytearray]:
        """Append ``data``; return every frame now complete. Raises CodecError on a bad frame."""
        self._buffer += data
        frames: list[bytearray] = []
        pos = 0
        while True:
            if self._need is None:
                if len(self._buffer) - pos < LENGTH.size:
                    break
                (self._need,) = LENGTH.unpack_from(self._buffer, pos)
                _check_length(length=self._need, max_frame_bytes=self._max_frame_bytes)
            start = pos + LENGTH.size
            check_prefix(data=self._buffer[start:start + len(MAGIC) + 1])
            if len(self._buffer) < start + self._need:
                break
            frames.append(self._buffer[start:start + self._need])
            pos = start + self._need
            self._need = None
        del self._buffer[:pos]  # once per feed: no quadratic shifting when many frames arrive together
        return frames
