"""The Ray object store as a transfer-benchmark transport (only imported when ``ray`` is installed).

Each sender is a Ray actor whose generator method yields ``{"t": send time, "x": array}``: Ray's worker
``ray.put``s every yielded value into the shared-memory object store (pickle 5, the array out of
band) and streams the ref to the caller; the receiver (this process) ``ray.get``s each ref as it
arrives, getting a zero-copy read-only view of the object store. One receiving thread per sender.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from nimbus.bench.payloads import make_payload
from nimbus.bench.transport_base import CellSpec, Sample, Transport
from nimbus.data.shm import streaming_copy_env


class _RaySender:
    def __init__(self, index: int) -> None:
        self.index = index
        self.payload: np.ndarray | None = None

    def prepare(self, cell: CellSpec) -> bool:
        self.payload = make_payload(kind=cell.payload, nbytes=cell.size_bytes, seed=self.index)  # type: ignore[arg-type]
        return True

    def run(self, messages: int):  # noqa: ANN201 - a Ray streaming generator
        for _ in range(messages):
            yield {"t": time.perf_counter(), "x": self.payload}


class RayTransport(Transport):
    name = "ray"

    def __init__(self, *, n: int) -> None:
        import ray

        self.ray = ray
        if not ray.is_initialized():
            ray.init(num_cpus=max(2, n), include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                     configure_logging=False)
        tunables = streaming_copy_env(dict(os.environ))["GLIBC_TUNABLES"]  # as every other transport's senders
        actor = ray.remote(num_cpus=0)(_RaySender).options(runtime_env={"env_vars": {"GLIBC_TUNABLES": tunables}})
        self.senders = [actor.remote(index) for index in range(n)]

    def run(self, *, cell: CellSpec) -> tuple[float, list[Sample]]:
        ray = self.ray
        senders = self.senders[:cell.senders]
        ray.get([sender.prepare.remote(cell) for sender in senders])
        samples: list[Sample] = []
        lock = threading.Lock()
        errors: list[BaseException] = []
        started = time.perf_counter()
        generators = [sender.run.options(num_returns="streaming").remote(cell.messages) for sender in senders]
        threads = [threading.Thread(target=self._drain, args=(gen, samples, lock, errors)) for gen in generators]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return started, samples

    def _drain(self, generator: Any, samples: list[Sample], lock: threading.Lock, errors: list[BaseException]) -> None:
        try:
            for ref in generator:
                value = self.ray.get(ref)
                sample = (float(value["t"]), time.perf_counter(), int(value["x"].nbytes))
                del value, ref
                with lock:
                    samples.append(sample)
        except BaseException as exc:  # noqa: BLE001 - re-raised by run()
            errors.append(exc)

    def close(self) -> None:
        for sender in self.senders:
            self.ray.kill(sender)
        self.ray.shutdown()
