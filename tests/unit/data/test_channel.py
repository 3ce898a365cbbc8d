"""The Channel: bodies of every size round-trip, segments never leak, bad peers are dropped (P11)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from nimbus.data.channel import Body, Inbox, Outbox, body_segment_prefix, header_frame, open_frame, prepare_body
from nimbus.data.codec import Message, decode
from nimbus.data.frames import new_segment_name, slot_header_frame
from nimbus.data.shm import Segment, list_segments, run_prefix
from nimbus.data.slots import SlotPool, write_message
from nimbus.data.transport import LENGTH
from nimbus.errors import CodecError
from support import evil_pickle, wait_for

MiB = 1 << 20


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    inbox = Inbox()
    inbox.add_source(source="peer", sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(), pid=os.getpid()))
    outbox = Outbox(sock=a, compress_min_bytes=MiB)
    yield outbox, inbox
    outbox.close()
    inbox.close()
    a.close()


@pytest.mark.parametrize("kind", ["inline", "shm", "shm_lz4"])
def test_bodies_round_trip(pair, kind: str) -> None:
    outbox, inbox = pair
    rng = np.random.default_rng(0)
    arrays = {
        "inline": {"obs": rng.standard_normal((16, 4)).astype(np.float32)},
        "shm": {"noise": rng.integers(0, 256, 2 * MiB, dtype=np.uint8)},  # incompressible: sent raw
        "shm_lz4": {"zeros": np.zeros((3 * MiB // 4,), np.float32), "ids": np.arange(7, dtype=np.int64)},
    }[kind]
    before = list_segments(prefix=run_prefix())
    outbox.send(message=Message(header={"kind": kind}, arrays=arrays), tag={"n": 1})
    envelope = inbox.get(timeout_s=10)
    assert envelope.tag == {"n": 1} and envelope.message.header == {"kind": kind}
    for name, array in arrays.items():
        np.testing.assert_array_equal(envelope.message.arrays[name], array)
    assert envelope.via_segment == (kind != "inline")
    assert envelope.compressed == (kind == "shm_lz4")
    assert list_segments(prefix=run_prefix()) == before  # unlinked as soon as the body was local


def test_callback_mode_and_order() -> None:
    a, b = socket.socketpair()
    got, done = [], threading.Event()
    inbox = Inbox(on_message=lambda e: (got.append(e.tag["i"]), len(got) == 20 and done.set()))
    inbox.add_source(source="p", sock=b)
    outbox = Outbox(sock=a, inline_max_bytes=1024)
    for i in range(20):
        outbox.send(message=Message(arrays={"x": np.full(i * 100, i, np.uint8)}), tag={"i": i})
    assert done.wait(10) and got == list(range(20))
    outbox.close(), inbox.close(), a.close()


def test_unannounced_segments_of_a_dead_source_are_swept() -> None:
    a, b = socket.socketpair()
    closed = threading.Event()
    inbox = Inbox(on_close=lambda source, error: closed.set())
    prefix = body_segment_prefix(prefix=run_prefix(), pid=os.getpid())
    inbox.add_source(source="p", sock=b, segment_prefix=prefix)
    stray = Segment.create(name=f"{prefix}999", size_bytes=4096)  # created, never announced
    stray.close()
    a.close()  # the sender dies
    assert closed.wait(5)
    assert list_segments(prefix=prefix) == []
    inbox.close()


def test_encode_errors_are_reported_and_leave_nothing(pair) -> None:
    a, b = socket.socketpair()
    errors = []
    outbox = Outbox(sock=a, on_error=lambda tag, exc: errors.append((tag, type(exc).__name__)))
    outbox.send(message=Message(arrays={"c": np.zeros(3, np.complex64)}), tag={"bad": True})
    assert outbox.flush(timeout_s=5)
    assert errors == [({"bad": True}, "CodecError")]
    outbox.close(), a.close(), b.close()


def test_pickle_from_a_peer_drops_it_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = evil_pickle(marker)
    a, b = socket.socketpair()
    closed = []
    inbox = Inbox(on_close=lambda source, error: closed.append((source, type(error).__name__)))
    inbox.add_source(source="evil", sock=b)
    a.sendall(LENGTH.pack(len(payload)) + payload)
    assert wait_for(lambda: bool(closed), timeout_s=5, interval_s=0.01)
    assert closed == [("evil", "CodecError")] and not marker.exists()
    inbox.close(), a.close()


def test_a_header_cannot_name_a_segment_outside_its_prefix() -> None:
    victim_name = f"{run_prefix()}store_victim"
    victim = Segment.create(name=victim_name, size_bytes=64)
    victim.close()
    own_prefix = body_segment_prefix(prefix=run_prefix(), pid=os.getpid())
    forged = header_frame(tag={}, body=Body(inline=None, segment=victim_name, nbytes=64, compressed=False))
    with pytest.raises(CodecError, match="outside its prefix"):
        open_frame(frame=forged, source="p", unlink_segment=True, allowed_prefix=own_prefix)
    assert victim_name in list_segments(prefix=run_prefix())
    body = prepare_body(message=Message(arrays={"x": np.zeros(1 << 17, np.uint8)}), prefix=run_prefix())
    envelope = open_frame(frame=header_frame(tag={}, body=body), source="p", unlink_segment=True,
                          allowed_prefix=own_prefix)
    assert envelope.message.arrays["x"].nbytes == 1 << 17
    assert body.segment not in list_segments(prefix=run_prefix())


def test_slot_headers_round_trip_and_malformed_ones_are_refused() -> None:
    own_prefix = body_segment_prefix(prefix=run_prefix(), pid=os.getpid())
    pool = SlotPool.create(name=new_segment_name(prefix=run_prefix()), num_slots=1, slot_bytes=1 << 16)
    try:
        nbytes, _ = write_message(pool=pool, slot=0, message=Message(arrays={"x": np.arange(8.0)}))
        frame = slot_header_frame(tag={"round": 7, "who": "ä"}, pool=pool.name, slot=0, reader=0, nbytes=nbytes,
                                  compressed=False)
        envelope = open_frame(frame=frame, source="p", unlink_segment=True, allowed_prefix=own_prefix, pools={})
        assert envelope.tag == {"round": 7, "who": "ä"} and envelope.slot == 0
        np.testing.assert_array_equal(envelope.message.arrays["x"], np.arange(8.0))
        with pytest.raises(CodecError, match="slot header"):
            decode(frame)  # not a message frame: refused, not misread
        for bad in (frame[:-3], frame[:12], frame[:-len(b'{"round":7,"who":"\\u00e4"}')] + b"[1]"):
            with pytest.raises(CodecError, match="malformed slot header"):
                open_frame(frame=bad, source="p", unlink_segment=True, allowed_prefix=own_prefix, pools={})
        forged = slot_header_frame(tag={}, pool=f"{run_prefix()}store_victim", slot=0, reader=0, nbytes=8,
                                   compressed=False)
        with pytest.raises(CodecError, match="outside its prefix"):
            open_frame(frame=forged, source="p", unlink_segment=True, allowed_prefix=own_prefix, pools={})
    finally:
        del envelope
        pool.close()
