"""What every transport of ``nimbus bench transfer`` shares: the cell, the samples, the receiver base classes and
the persistent sender processes. A sender process finds its sender class by name (``module:Class``), so this module
imports no transport (bench/transports.py, redisbench.py and raybench.py import it).

A sender has ``prepare(*, cell)``, ``send(*, array, seq)``, ``flush()`` and ``close()``; a transport's receiver side
is a ``Transport`` (``run(*, cell) -> (start time, samples)``).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from nimbus.bench.payloads import make_payload
from nimbus.data.shm import streaming_copy_env

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


def load_sender(*, name: str) -> Any:
    """The sender class named ``module:Class`` (imported in the sender process)."""
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


def sender_main(sender_name: str, index: int, conn: Connection, setup: dict[str, Any]) -> None:
    """A sender process: prepare, wait for "go", push the cell's messages, report "done"; until "stop"."""
    sender = load_sender(name=sender_name)(index=index, setup=setup)
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
    with the environment nimbus gives its workers (``shm.streaming_copy_env``), whatever the transport.
    ``sender``: the sender class as ``module:Class``."""

    def __init__(self, *, sender: str, n: int, setup: dict[str, Any]) -> None:
        context = mp.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs: list[mp.Process] = []
        saved = dict(os.environ)
        os.environ.update(streaming_copy_env(saved))  # spawn hands this process's environment to the children
        try:
            for index in range(n):
                parent, child = context.Pipe()
                proc = context.Process(target=sender_main, args=(sender, index, child, setup), daemon=True)
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


class Transport:
    """Receiver side of one transport: ``run(cell)`` returns (start time, samples)."""

    name = "transport"

    def run(self, *, cell: CellSpec) -> tuple[float, list[Sample]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ProcessTransport(Transport):
    """A transport whose senders are processes: ``kind`` names it, ``sender`` is its sender class (``module:Class``)."""

    def __init__(self, *, kind: str, sender: str, n: int, setup: dict[str, Any]) -> None:
        self.name = kind
        self.group = SenderGroup(sender=sender, n=n, setup=setup)

    def run(self, *, cell: CellSpec) -> tuple[float, list[Sample]]:
        started = self.group.start(cell=cell)
        samples = self._receive(count=cell.senders * cell.messages, deadline=started + RECEIVE_TIMEOUT_S)
        self.group.finish(cell=cell)
        return started, samples

    def _receive(self, *, count: int, deadline: float) -> list[Sample]:
        raise NotImplementedError

    def close(self) -> None:
        self.group.close()
