"""The fork server's request parser (runtime/fork_template.py ``parse_request``) and the server under bad requests:
a request that is not a valid spawn request is refused with an error reply; the server and its workers go on."""

from __future__ import annotations

import json
import os
import socket
import struct
from dataclasses import asdict, fields

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nimbus.data.codec import MAGIC, PREFIX, VERSION, Message, decode, encode
from nimbus.errors import CodecError
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.fork_template import SpawnRequest, parse_request
from nimbus.runtime.forkserver import ForkServer
from runtime_helpers import pid_alive

INTROSPECT = FunctionSpec(name="introspect", entrypoint="nimbus.runtime.builtin:introspect", timeout_s=20.0)
VALID = SpawnRequest(worker_id="w1", function="introspect", entrypoint="nimbus.runtime.builtin:introspect",
                     prefix="nimbus_fsreq_", spawn_time=1.5e9, threads=1, driver_pid=os.getpid(),
                     inline_max_bytes=65536, compress_min_bytes=-1)
NAMES = [f.name for f in fields(SpawnRequest)]
WRONG_VALUES = [None, "", "x", -1, -2, 0, 1.5, float("nan"), True, [], {}, [1], 1 << 70]


def _frame(header: dict) -> bytes:
    return encode(Message(header=header), compress_min_bytes=None)


def test_a_valid_request_round_trips() -> None:
    assert parse_request(data=_frame(asdict(VALID))) == VALID
    assert parse_request(data=_frame({**asdict(VALID), "prefix": ""})).prefix == ""   # an early server's request


@pytest.mark.parametrize("name", NAMES)
def test_a_request_missing_any_field_is_refused(name: str) -> None:
    header = asdict(VALID)
    del header[name]
    with pytest.raises(CodecError, match=name):
        parse_request(data=_frame(header))


@pytest.mark.parametrize("name,value", [("threads", 0), ("threads", True), ("threads", 2.0), ("driver_pid", 0),
                                        ("inline_max_bytes", -1), ("compress_min_bytes", -2), ("spawn_time", "1"),
                                        ("spawn_time", float("inf")), ("spawn_time", -1.0), ("worker_id", ""),
                                        ("entrypoint", ""), ("entrypoint", 7), ("prefix", None), ("function", ["f"])])
def test_a_request_with_a_wrong_field_is_refused(name: str, value: object) -> None:
    with pytest.raises(CodecError, match=name):
        parse_request(data=_frame({**asdict(VALID), name: value}))


def _mutated(data: st.DataObject) -> bytes:
    """A valid request frame, then: fields dropped or retyped, bits flipped, cut short, or bytes replaced."""
    header = asdict(VALID)
    for name in data.draw(st.lists(st.sampled_from(NAMES), max_size=3), label="drop"):
        header.pop(name, None)
    for name in data.draw(st.lists(st.sampled_from(NAMES), max_size=2), label="retype"):
        header[name] = data.draw(st.sampled_from(WRONG_VALUES), label="value")
    frame = bytearray(_frame(header))
    for _ in range(data.draw(st.integers(0, 4), label="flips")):
        frame[data.draw(st.integers(0, len(frame) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    if data.draw(st.booleans(), label="truncate"):
        del frame[data.draw(st.integers(0, len(frame))):]
    if data.draw(st.booleans(), label="garbage"):
        at = data.draw(st.integers(0, len(frame)))
        frame[at:at + 4] = data.draw(st.binary(min_size=1, max_size=8))
    return bytes(frame)


def _parse_or_refuse(frame: bytes) -> SpawnRequest | None:
    try:
        request = parse_request(data=frame)
    except CodecError:
        return None  # the only exception the parser may raise: the server refuses the request
    assert all(type(getattr(request, f.name)).__name__ == f.type for f in fields(SpawnRequest)), request
    return request


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_only_codec_error_escapes_the_parser_of_a_mutated_request(data: st.DataObject) -> None:
    _parse_or_refuse(_mutated(data))


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=300), header=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(NAMES), inner, max_size=9),
    max_leaves=12))
def test_only_codec_error_escapes_the_parser_of_random_frames(raw: bytes, header: object) -> None:
    _parse_or_refuse(raw)
    meta = json.dumps(json.dumps(header)).encode()
    layout = b'{"__metadata__":{"nimbus":' + meta + b"}}"
    layout += b" " * (-len(layout) % 8)
    _parse_or_refuse(PREFIX.pack(MAGIC, VERSION, 0, 0) + struct.pack("<Q", len(layout)) + layout)


def _ask(server: ForkServer, frame: bytes, attach: bool) -> dict:
    ours, theirs = socket.socketpair()
    try:
        socket.send_fds(server._sock, [frame], [theirs.fileno()] if attach else [])
        data, fds, _, _ = socket.recv_fds(server._sock, 1 << 16, 1)
    finally:
        ours.close()
        theirs.close()
    for fd in fds:
        os.close(fd)
    return decode(data).header


def test_the_server_refuses_bad_requests_and_keeps_serving_its_workers() -> None:
    """Regression: a frame missing keys crashed the server (KeyError) and its workers died with it."""
    server = ForkServer(prefix="nimbus_fsreq_", preload=(), env=dict(os.environ), janitor_track=lambda pid: None)
    workers = []
    try:
        workers.append(server.spawn(worker_id="w1", spec=INTROSPECT, inline_max_bytes=65536, compress_min_bytes=None))
        server_pid = server.pid
        assert _ask(server, _frame({"worker_id": "x"}), attach=True)["error"].startswith("not a spawn request")

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(data=st.data(), attach=st.booleans())
        def bad_requests_are_refused(data: st.DataObject, attach: bool) -> None:
            frame = _mutated(data)
            # frames the parser accepts would fork: not this test's business; an empty SOCK_SEQPACKET message
            # reads as the driver closing its end (the server exits 0), and the driver never sends one
            if frame and _parse_or_refuse(frame) is None:
                reply = _ask(server, frame, attach=attach)
                assert reply["pid"] == 0 and reply["error"].startswith("not a spawn request"), reply

        bad_requests_are_refused()
        assert server._proc.poll() is None and server.pid == server_pid
        assert pid_alive(workers[0][0].pid)   # the worker forked before the bad requests is still there
        workers.append(server.spawn(worker_id="w2", spec=INTROSPECT, inline_max_bytes=65536, compress_min_bytes=None))
        assert server.pid == server_pid and pid_alive(workers[1][0].pid)   # the same server forked it
    finally:
        for proc, sock, _ in workers:
            sock.close()
            proc.kill()
        server.close()
