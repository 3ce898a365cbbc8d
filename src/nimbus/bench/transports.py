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

The cell, the samples and the sender processes are in bench/transport_base.py; ``make_transport`` picks a
transport by name and imports the Redis and Ray ones only when asked.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from typing import Any

import numpy as np

from nimbus.bench.payloads import make_payload
from nimbus.bench.transport_base import CellSpec, ProcessTransport, Sample, Transport
from nimbus.data.channel import ChannelLimits, Envelope, Inbox, Outbox
from nimbus.data.codec import DEFAULT_COMPRESS_MIN_BYTES, Message
from nimbus.data.frames import body_segment_prefix, new_segment_name
from nimbus.data.shm import run_prefix
from nimbus.data.slots import SlotPool


# ---------------------------------------------------------------------------------------- senders
class MpQueueSender:
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


class ChannelSender:
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


# -------------------------------------------------------------------------------------- receivers
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


class MpQueueTransport(ProcessTransport):
    def __init__(self, *, n: int) -> None:
        self.queue = mp.get_context("spawn").Queue()
        super().__init__(kind="mp_queue", sender="nimbus.bench.transports:MpQueueSender", n=n,
                         setup={"queue": self.queue})

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
        super().__init__(kind="channel" if pooled else "channel_segment",
                         sender="nimbus.bench.transports:ChannelSender", n=n, setup={"path": path, "pooled": pooled})
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


