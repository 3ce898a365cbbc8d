"""Length-prefixed codec frames: round trip, size guard, and no code execution from data (P11)."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

from nimbus.data.codec import Message, decode, encode
from nimbus.data.transport import LENGTH, FrameReader, recv_frame, send_frame
from nimbus.errors import CodecError
from runtime_helpers import evil_pickle


def test_frame_round_trip_and_eof() -> None:
    a, b = socket.socketpair()
    frame = encode(Message(header={"x": 1}, arrays={"a": np.arange(5, dtype=np.int32)}))
    send_frame(sock=a, frame=frame)
    got = decode(recv_frame(sock=b))
    assert got.header == {"x": 1} and got.arrays["a"].tolist() == [0, 1, 2, 3, 4]
    a.close()
    assert recv_frame(sock=b) is None


def test_oversized_frames_are_refused_on_both_sides() -> None:
    a, b = socket.socketpair()
    frame = encode(Message(arrays={"a": np.zeros(1000, np.uint8)}))
    with pytest.raises(CodecError, match="exceeds"):
        send_frame(sock=a, frame=frame, max_frame_bytes=100)
    a.sendall(LENGTH.pack(1 << 40))  # a hostile length: must not allocate a terabyte
    with pytest.raises(CodecError, match="exceeds"):
        recv_frame(sock=b)


def test_pickle_on_the_socket_is_rejected_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = evil_pickle(marker)
    a, b = socket.socketpair()
    a.sendall(LENGTH.pack(len(payload)) + payload)
    with pytest.raises(CodecError, match="not a nimbus frame"):
        recv_frame(sock=b)
    with pytest.raises(CodecError):
        FrameReader().feed(data=LENGTH.pack(len(payload)) + payload)
    with pytest.raises(CodecError):
        decode(payload)
    assert not marker.exists()


def test_frame_reader_reassembles_split_frames() -> None:
    frames = [encode(Message(header={"i": i}, arrays={"a": np.full(i + 1, i, np.int64)})) for i in range(3)]
    stream = b"".join(LENGTH.pack(len(f)) + f for f in frames)
    reader = FrameReader()
    out = []
    for start in range(0, len(stream), 7):
        out += reader.feed(data=stream[start:start + 7])
    assert [decode(f).header["i"] for f in out] == [0, 1, 2]
