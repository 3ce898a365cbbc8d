"""The transports of ``nimbus bench transfer``: one sender process per sender, one receiver (this process).

Every transport delivers each message to the receiver as a numpy array it can read; none touches the
payload after that (zero-copy receivers keep views, copying receivers already copied). Each sender
stamps ``time.perf_counter()`` (CLOCK_MONOTONIC, one clock for every process) right before it hands a
message to its transport; the receiver stamps the moment the message is in its hands.

* ``memcpy``: in-process ``src.copy()`` (a fresh array per message, as a receiver that needs its own
  copy pays); the ratio denominator. ``memcpy_warm`` copies into one pre-touched array instead.
* ``mp_queue``: ``multiprocessing.Queue`` (pickle protocol 5 through a pipe).
* ``redis``: codec frames SET by the sender, key posted on an ``mp.SimpleQueue``, GETDEL by the
  receiver, against a real ``redis-server`` on a free loopback port started for the benchmark.
* ``channel``: nimbus's Outbox → Inbox with a pre-touched slot pool per sender (zero-copy receive),
  consumed by the Inbox's ``on_message`` callback on its receiver thread (how the runtime consumes);
  the Outbox queue is bounded (4 messages, block) so, as with Ray's synchronous put, a burst's
  latency counts a few queued messages, not the whole burst;
  ``channel_segment``: the same Channel with a fresh segment per body (the runtime's default path).
* ``ray``: an actor per sender yields the arrays (``ray.put`` by the worker, a streaming generator),
  the receiver ``ray.get``s each ref (zero-copy from the object store) — see bench/raybench.py;
  Redis lives in bench/redisbench.py.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable

import numpy as np

from nimbus.bench.payloads import make_payload
from nimbus.data.channel import ChannelLimits, Envelope, Inbox, Outbox
from nimbus.data.codec import DEFAULT_COMPRESS_MIN_BYTES, Message
from nimbus.data.frames import body_segment_prefix, new_segment_name
from nimbus.data.shm import run_prefix, streaming_copy_env
from nimbus.data.slots import SlotPool

log = logging.getLogger(__name__)
Sample = tuple[float, float, int]  # (t_send, t_recv, payload bytes)
RECEIVE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class CellSpec:
    """One measurement: ``senders`` × ``messages`` messages of ``size_bytes`` of ``payload``."""

    senders: int
    size_bytes: int
    messages: int
    payload: str
    compress: bool


# ---------------------------------------------------------------------------------------- senders
class _MpQueueSender:
    def __init__(self, *, index: int, setup: dict[str, Any]) -> None:
        self.index, self.queue = index, setup["queue"]

    def prepare(self, *, cell: CellSpec) -> None:
        pass

    def send(self, *, array: np.ndarray, seq: int) -> None:
        self.queue.put((time.perf_counter(), array))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.queue.close()
        self.queue.join_thread()


class _ChannelSender:
    """One Outbox per (message size, LZ4 on/off), made on first use and kept for the whole benchmark, as a
    run keeps its pools: the pool is created and pre-touched, and mapped by the receiver during the
    unrecorded warm-up pass, never inside a timed cell."""

    def __init__(self, *, index: int, setup: dict[str, Any]) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(setup["path"])
        self.pooled, self.index = setup["pooled"], index
        self.outboxes: dict[tuple[int, bool], Outbox] = {}
        self.outbox: Outbox | None = None

    def prepare(self, *, cell: CellSpec) -> None:
        key = (cell.size_bytes, cell.compress)
        if key not in self.outboxes:
            pool = None
            if self.pooled:
                num_slots = 4 if cell.size_bytes > 32 << 20 else 8
                pool = SlotPool.create(name=new_segment_name(prefix=run_prefix()), num_slots=num_slots,
                                       slot_bytes=cell.size_bytes + (64 << 10))
            self.outboxes[key] = Outbox(sock=self.sock, pool=pool, inline_max_bytes=1 << 10,
                                        compress_min_bytes=DEFAULT_COMPRESS_MIN_BYTES if cell.compress else None,
                                        limits=ChannelLimits(max_queued_messages=4, on_full="block"))
        self.outbox = self.outboxes[key]

    def send(self, *, array: np.ndarray, seq: int) -> None:
        self.outbox.send(message=Message(arrays={"x": array}), tag={"t": time.perf_counter()})

    def flush(self) -> None:
        self.outbox.flush()

    def close(self) -> None:
        for outbox in self.outboxes.values():
            outbox.close()
        self.sock.close()


def _redis_sender(*, index: int, setup: dict[str, Any]) -> Any:
    from nimbus.bench.redisbench import RedisSender

    return RedisSender(index=index, setup=setup)


SENDERS: dict[str, Callable[..., Any]] = {"mp_queue": _MpQueueSender, "redis": _redis_sender,
                                          "channel": _ChannelSender, "channel_segment": _ChannelSender}


def sender_main(kind: str, index: int, conn: Connection, setup: dict[str, Any]) -> None:
    """A sender process: prepare, wait for "go", push the cell's messages, report "done"; until "stop"."""
    sender = SENDERS[kind](index=index, setup=setup)
    payloads: dict[tuple[str, int], np.ndarray] = {}
    while True:
        command = conn.recv()
        if command == "stop":
            sender.close()
            return
        cell: CellSpec = command
        key = (cell.payload, cell.size_bytes)
        if key not in payloads:
            payloads.clear()
            payloads[key] = make_payload(kind=cell.payload, nbytes=cell.size_bytes, seed=index)  # type: ignore[arg-type]
        sender.prepare(cell=cell)
        conn.send("ready")
        conn.recv()  # go
        for seq in range(cell.messages):
            sender.send(array=payloads[key], seq=seq)
        sender.flush()
        conn.send("done")


class SenderGroup:
    """``n`` persistent sender processes of one transport (spawned once, reused by every cell), started
    with the environment nimbus gives its workers (``shm.streaming_copy_env``), whatever the transport."""

    def __init__(self, *, kind: str, n: int, setup: dict[str, Any]) -> None:
        context = mp.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs: list[mp.Process] = []
        saved = dict(os.environ)
        os.environ.update(streaming_copy_env(saved))  # spawn hands this process's environment to the children
        try:
            for index in range(n):
                parent, child = context.Pipe()
                proc = context.Process(target=sender_main, args=(kind, index, child, setup), daemon=True)
                proc.start()
                self.conns.append(parent)
                self.procs.append(proc)
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def start(self, *, cell: CellSpec) -> float:
        """Prepare every sender for ``cell``, then release them together; returns the start time."""
        for conn in self.conns[:cell.senders]:
            conn.send(cell)
        for conn in self.conns[:cell.senders]:
            _expect(conn=conn, word="ready")
        started = time.perf_counter()
        for conn in self.conns[:cell.senders]:
            conn.send("go")
        return started

    def finish(self, *, cell: CellSpec) -> None:
        for conn in self.conns[:cell.senders]:
            _expect(conn=conn, word="done")

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs):
            try:
                conn.send("stop")
            except OSError:
                pass
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def _expect(*, conn: Connection, word: str) -> None:
    if not conn.poll(RECEIVE_TIMEOUT_S):
        raise TimeoutError(f"a sender did not say {word!r} within {RECEIVE_TIMEOUT_S} s")
    got = conn.recv()
    if got != word:
        raise RuntimeError(f"a sender said {got!r}, expected {word!r}")


# -------------------------------------------------------------------------------------- receivers
class Transport:
    """Receiver side of one transport: ``run(cell)`` returns (start time, samples)."""

    name = "transport"

    def run(self, *, cell: CellSpec) -> tuple[float, list[Sample]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class MemcpyTransport(Transport):
    def __init__(self, *, warm: bool) -> None:
        self.name, self.warm = ("memcpy_warm" if warm else "memcpy"), warm

    def run(self, *, cell: CellSpec) -> tuple[float, list[Sample]]:
        src = make_payload(kind=cell.payload, nbytes=cell.size_bytes, seed=0)  # type: ignore[arg-type]
        dst = np.empty_like(src)
        dst[...] = 0
        samples: list[Sample] = []
        started = time.perf_counter()
        for _ in range(cell.senders * cell.messages):
            t_send = time.perf_counter()
            if self.warm:
                np.copyto(dst, src)
            else:
                src.copy()  # a fresh array per message, dropped at once
            samples.append((t_send, time.perf_counter(), src.nbytes))
        return started, samples


class ProcessTransport(Transport):
    def __init__(self, *, kind: str, n: int, setup: dict[str, Any]) -> None:
        self.name = kind
        self.group = SenderGroup(kind=kind, n=n, setup=setup)

    def run(self, *, cell: CellSpec) -> tuple[float, list[Sample]]:
        started = self.group.start(cell=cell)
        samples = self._receive(count=cell.senders * cell.messages, deadline=started + RECEIVE_TIMEOUT_S)
        self.group.finish(cell=cell)
        return started, samples

    def _receive(self, *, count: int, deadline: float) -> list[Sample]:
        raise NotImplementedError

    def close(self) -> None:
        self.group.close()


class MpQueueTransport(ProcessTransport):
    def __init__(self, *, n: int) -> None:
        self.queue = mp.get_context("spawn").Queue()
        super().__init__(kind="mp_queue", n=n, setup={"queue": self.queue})

    def _receive(self, *, count: int, deadline: float) -> list[Sample]:
        samples = []
        for _ in range(count):
            t_send, array = self.queue.get(timeout=max(0.1, deadline - time.perf_counter()))
            samples.append((t_send, time.perf_counter(), array.nbytes))
            del array
        return samples


class ChannelTransport(ProcessTransport):
    def __init__(self, *, n: int, pooled: bool) -> None:
        self.dir = tempfile.mkdtemp(prefix="nimbus-bench-")
        path = os.path.join(self.dir, "inbox.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(n)
        self.arrived: list[Sample] = []
        self.expected, self.all_in = 0, threading.Event()
        self.inbox = Inbox(on_message=self._consume)  # the runtime's mode: consumed on the receiver thread
        run_prefix()  # fix the run's segment prefix before the senders inherit the environment
        super().__init__(kind="channel" if pooled else "channel_segment", n=n, setup={"path": path, "pooled": pooled})
        listener.settimeout(60)
        for _ in range(n):
            sock, _ = listener.accept()
            pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            self.inbox.add_source(source=f"sender-{pid}", sock=sock,
                                  segment_prefix=body_segment_prefix(prefix=run_prefix(), pid=pid))
        listener.close()

    def run(self, *, cell: CellSpec) -> tuple[float, list[Sample]]:
        self.arrived, self.expected = [], cell.senders * cell.messages
        self.all_in.clear()
        return super().run(cell=cell)

    def _consume(self, envelope: Envelope) -> None:
        self.arrived.append((float(envelope.tag["t"]), time.perf_counter(), envelope.message.arrays["x"].nbytes))
        if len(self.arrived) == self.expected:
            self.all_in.set()
        # returning drops the envelope: its slot goes back to the sender here

    def _receive(self, *, count: int, deadline: float) -> list[Sample]:
        if not self.all_in.wait(timeout=max(0.1, deadline - time.perf_counter())):
            raise TimeoutError(f"received {len(self.arrived)} of {count} messages")
        return list(self.arrived)

    def close(self) -> None:
        super().close()
        self.inbox.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def unavailable(*, name: str) -> str | None:
    """Why transport ``name`` cannot run here (None: it can)."""
    import importlib.util

    if name == "redis" and (importlib.util.find_spec("redis") is None or shutil.which("redis-server") is None):
        return "needs the [redis] extra and a redis-server binary"
    if name == "ray" and importlib.util.find_spec("ray") is None:
        return "needs the [ray] extra"
    return None


def make_transport(*, name: str, n: int) -> Transport:
    if name in ("memcpy", "memcpy_warm"):
        return MemcpyTransport(warm=name == "memcpy_warm")
    if name == "mp_queue":
        return MpQueueTransport(n=n)
    if name in ("channel", "channel_segment"):
        return ChannelTransport(n=n, pooled=name == "channel")
    if name == "redis":
        from nimbus.bench.redisbench import RedisTransport

        return RedisTransport(n=n)
    if name == "ray":
        from nimbus.bench.raybench import RayTransport

        return RayTransport(n=n)
    raise ValueError(f"unknown transport {name!r}")


__all__ = ["CellSpec", "Sample", "Transport", "make_transport", "unavailable"]
