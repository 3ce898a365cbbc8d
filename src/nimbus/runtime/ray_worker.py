"""The worker side of the ``ray`` runtime: one Ray actor is one warm worker bound to one function.

``FunctionWorker`` is the same container as runtime/worker.py's process, as a Ray actor: its
constructor applies the run's environment (segment prefix, thread limits, store credentials),
imports the entrypoint once and times it (``init_s``, from the driver's request to imported); every
``invoke`` runs ``fn(context=FunctionContext(...), request=Message)`` with one ``context.cache`` kept
across invocations (warm state) and answers with one codec frame::

    header = {"_nimbus_report": {outcome, start_at, end_at, error, ...}, "body": <result header>}
    arrays = <result arrays>

Requests and results travel as codec frames in uint8 arrays (Ray stores them in its object store and
hands out read-only views; frames under ~100 KiB are inlined and copied). Ray also serialises, with
its own pickle, the plain values nimbus passes beside them: this class's constructor arguments
(worker id, function name, entrypoint, a timestamp, and ``env``, which carries the Redis password
when the run has one — docs/cluster.md §4), each invocation's id, attempt number and ``heartbeat_s``, and the
Channel's tag dicts and the Store's keys (data/ray_channel.py, data/ray_store.py). All of them are
str, int, float, dict and list values or uint8 arrays; Ray unpickles them inside its own processes,
under Ray's trust model. nimbus itself never unpickles anything.

Example (what the driver does)::

    actor = ray.remote(FunctionWorker).options(num_cpus=1).remote(worker_id="actor-1", ...)
    report = read_frame(ray.get(actor.ready.remote()))
    result = read_frame(ray.get(actor.invoke.remote(frame_ref, "inv-id", 1)))
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np

from nimbus import liveness
from nimbus.data.codec import Message, decode, encode
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.worker import error_report, invoke_function, limit_torch_threads, load_entrypoint

log = logging.getLogger(__name__)
REPORT_KEY = "_nimbus_report"


def to_frame(message: Message, *, compress_min_bytes: int | None) -> np.ndarray:
    """A codec frame as a uint8 array (what the object store holds)."""
    return np.frombuffer(encode(message, compress_min_bytes=compress_min_bytes), dtype=np.uint8)


def read_frame(frame: Any) -> Message:
    """Decode a frame that came back from Ray (a uint8 array view); CodecError if it is not one."""
    return decode(memoryview(np.ascontiguousarray(frame)))


class FunctionWorker:
    """A Ray actor serving one function (see the module docstring)."""

    def __init__(self, worker_id: str, function: str, entrypoint: str, requested_at: float,
                 env: dict[str, str], compress_min_bytes: int | None) -> None:
        os.environ.update(env)  # before the import: torch reads OMP_NUM_THREADS when it loads
        self._worker_id, self._function = worker_id, function
        self._compress_min_bytes = compress_min_bytes
        self._cache: dict[str, Any] = {}
        self._progress: dict[str, Any] = {"invocation_id": None, "attempt": 0, "beats": 0}
        try:
            self._fn, self._error = load_entrypoint(entrypoint), None
        except Exception as exc:  # noqa: BLE001 - reported by ready(); the driver bills and retries
            self._fn, self._error = None, error_report(exc)
        self._init_s = max(0.0, time.time() - requested_at)
        limit_torch_threads()

    def ready(self) -> np.ndarray:
        """The cold start's report: init time, pid, node, and the import error if any."""
        import ray

        header = {"init_s": self._init_s, "pid": os.getpid(), "error": self._error,
                  "node_id": ray.get_runtime_context().get_node_id()}
        return to_frame(Message(header=header), compress_min_bytes=None)

    def invoke(self, request: Any, invocation_id: str, attempt: int, heartbeat_s: float | None = None) -> np.ndarray:
        """Run one attempt; the outcome (and any error) is in the answer's report, never raised. With
        ``heartbeat_s``, the attempt's progress beats are counted for ``progress()`` (P5)."""
        context = FunctionContext(worker_id=self._worker_id, function=self._function,
                                  invocation_id=invocation_id, attempt=attempt, cache=self._cache)
        if self._fn is None:
            result, report = Message(), {"outcome": "error", "error": self._error,
                                         "start_at": time.time(), "end_at": time.time()}
        else:
            progress = {"invocation_id": invocation_id, "attempt": attempt, "beats": 0}
            self._progress = progress
            if heartbeat_s is not None:
                liveness.install(send=lambda: progress.update(beats=progress["beats"] + 1), interval_s=heartbeat_s)
            try:
                result, report = invoke_function(fn=self._fn, context=context, request=read_frame(request))
            finally:
                liveness.install(send=None)
            limit_torch_threads()
        header = {REPORT_KEY: report, "body": result.header}
        return to_frame(Message(header=header, arrays=result.arrays), compress_min_bytes=self._compress_min_bytes)

    def progress(self) -> np.ndarray:
        """The running (or last) attempt's beat count, ``{invocation_id, attempt, beats}``; answered on the
        actor's second thread while ``invoke`` runs (max_concurrency=2, runtime/ray_pool.py)."""
        return to_frame(Message(header=dict(self._progress)), compress_min_bytes=None)


def split_result(message: Message) -> tuple[dict[str, Any], Message]:
    """(report, the function's own result) of an ``invoke`` answer."""
    return message.header[REPORT_KEY], Message(header=message.header.get("body", {}), arrays=message.arrays)
