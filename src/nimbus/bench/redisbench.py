"""Redis as a transfer-benchmark transport: codec frames SET by each sender process, the key posted on
an ``mp.SimpleQueue``, GETDEL by the receiver, against a throw-away ``redis-server`` on a free loopback
port (no persistence, protected mode). LZ4 cells compress frames of ≥ 1 MiB before the SET.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import subprocess
import time
from typing import Any

import numpy as np

from nimbus.bench.transport_base import CellSpec, ProcessTransport, Sample
from nimbus.data.codec import DEFAULT_COMPRESS_MIN_BYTES, Message, decode, encode


class RedisSender:
    def __init__(self, *, index: int, setup: dict[str, Any]) -> None:
        import redis

        self.index, self.notify = index, setup["notify"]
        self.client = redis.Redis(host="127.0.0.1", port=setup["port"])
        self.compress_min: int | None = None

    def prepare(self, *, cell: CellSpec) -> None:
        self.compress_min = DEFAULT_COMPRESS_MIN_BYTES if cell.compress else None

    def send(self, *, array: np.ndarray, seq: int) -> None:
        t_send = time.perf_counter()
        key = f"bench:{self.index}:{seq}"
        self.client.set(key, encode(Message(arrays={"x": array}), compress_min_bytes=self.compress_min))
        self.notify.put((t_send, key))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.client.close()


class RedisServer:
    """A throw-away ``redis-server`` on a free loopback port (no persistence)."""

    def __init__(self) -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--protected-mode", "yes"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        client, deadline = redis.Redis(host="127.0.0.1", port=self.port), time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.close()
                    raise
                time.sleep(0.05)
        client.close()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class RedisTransport(ProcessTransport):
    def __init__(self, *, n: int) -> None:
        import redis

        self.server = RedisServer()
        self.client = redis.Redis(host="127.0.0.1", port=self.server.port)
        self.notify = mp.get_context("spawn").SimpleQueue()
        super().__init__(kind="redis", sender="nimbus.bench.redisbench:RedisSender", n=n,
                         setup={"port": self.server.port, "notify": self.notify})

    def _receive(self, *, count: int, deadline: float) -> list[Sample]:
        samples = []
        for _ in range(count):
            t_send, key = self.notify.get()
            message = decode(self.client.getdel(key))
            samples.append((t_send, time.perf_counter(), message.arrays["x"].nbytes))
            del message
        return samples

    def close(self) -> None:
        super().close()
        self.client.close()
        self.server.close()
