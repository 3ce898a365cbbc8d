"""InlineRuntime (``runtime.backend: inline``): functions run in the driver, one at a time, in submission order.

For tests and debugging: a workflow's logic runs without forking workers, deterministically for a seeded
run, through the same path as a worker (runtime/worker.py), so what passes here is what a worker would do:

* **Order**: one FIFO queue and one daemon thread (``nimbus-inline``) run invocations one at a time, in the
  order they were submitted; retries go to the front, as on the local backend. Futures resolve on that
  thread, as local ones do on its Inbox thread, so a workflow that blocks on ``.result()`` or waits on an
  event queue works unchanged. A function must never wait on an invocation queued after it: it would
  wait forever (nothing else runs meanwhile).
* **Cold and warm**: the entrypoint is imported (``load_entrypoint``: the module's ``init_worker`` hook
  too) once per pool key (name, entrypoint, resources, as ``same_pool``); the attempt that does it is the
  cold start (billed ``init_s``). Each pool key keeps one ``FunctionContext.cache`` (worker id
  ``inline-<name>``), so warm state behaves as on a local pool whose affinity always hits.
* **Codec**: a request is encoded when it is submitted and decoded (copied) when its attempt runs; a
  result is encoded and decoded (copied) before its future resolves. Nothing is shared with the caller,
  and a dtype the codec refuses fails the attempt as it would in a worker.
* **Driver state**: around each call the torch thread count, torch's CPU RNG, numpy's and ``random``'s
  global states are saved and restored (functions reseed and set threads as if they owned a process). Each
  pool key's slot keeps its own torch thread count from call to call, as a worker process does: it starts at
  ``cpus`` (max(1, floor)) and a function's ``torch.set_num_threads(n)`` sets min(n, cpus) (``slot_threads``;
  runtime/worker.py), so a warm call runs at the threads its cold call set, not at the driver's. The
  driver's own work on that state (a periodic or final evaluation) holds ``exclusive()``: no call runs
  meanwhile, so it neither moves a function's draws nor has its own moved (runtime/base.py ``between_calls``).
* **Ledger**: one ``attempt_record`` per attempt (and one per pool key ``prewarm``); an exception is
  retried up to ``max_retries`` unless marked not retryable, then the future raises ``FunctionFailed``
  with the original error. A device pool, if given, is leased around each call.
* **Not done**: ``timeout_s`` is not enforced (an attempt that overruns it is logged once per function,
  then ends normally); no heartbeats; no parallelism (``capacity_cpus``, ``max_workers``, ``keep_alive_s``
  and fair shares do not apply). ``preregister`` is a prewarm; ``set_shares`` is accepted and ignored.

Example::

    runtime = InlineRuntime(ledger=Ledger())
    spec = FunctionSpec(name="echo", entrypoint="nimbus.runtime.builtin:echo")
    assert runtime.invoke(spec=spec, request=Message(header={"x": 1})).result().header["x"] == 1
    runtime.shutdown()
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nimbus import liveness
from nimbus.cost.ledger import Ledger, Tally
from nimbus.data.codec import Message, decode, encode
from nimbus.data.stores import close_function_stores
from nimbus.runtime.attempts import Action, Attempt, AttemptEndings, Invocation, resolve
from nimbus.runtime.base import DriverSide, FunctionContext, FunctionSpec, Resources, RuntimeStats
from nimbus.runtime.devices import DevicePool
from nimbus.runtime.worker import error_report, invoke_function, load_entrypoint

log = logging.getLogger(__name__)
PoolKey = tuple[str, str, Resources]


@dataclass(eq=False)
class InlineSlot:
    """The one in-process "worker" of a pool key: its loaded callable and warm cache."""

    spec: FunctionSpec
    worker_id: str
    fn: Callable[..., Message] | None = None
    init_s: float = 0.0
    requested_at: float = 0.0
    cache: dict[str, Any] = field(default_factory=dict)
    attempt: Attempt | None = None
    torch_threads: int | None = None    # the slot's thread count between calls (None: not yet called)


class _Slots:
    """What ``AttemptEndings`` calls ``_pool``: an inline slot is never retired or put to sleep."""

    def retire(self, slot: InlineSlot) -> None:
        slot.attempt = None

    def set_idle(self, slot: InlineSlot) -> None:
        slot.attempt = None


@dataclass(eq=False)
class _Prewarm:
    spec: FunctionSpec
    done: threading.Event = field(default_factory=threading.Event)


@contextlib.contextmanager
def driver_state_kept() -> Iterator[None]:
    """Restore the torch thread count, torch's CPU RNG, numpy's and ``random``'s global state after the block."""
    import torch

    threads, np_state, py_state = torch.get_num_threads(), np.random.get_state(), random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_num_threads(threads)
        np.random.set_state(np_state)
        random.setstate(py_state)


@contextlib.contextmanager
def slot_threads(slot: InlineSlot) -> Iterator[None]:
    """The torch thread count a worker of ``slot``'s spec would have during the block: ``cpus`` at its first call,
    then what its calls left, with ``torch.set_num_threads(n)`` clamped to ``cpus`` as in runtime/worker.py.
    Inside ``driver_state_kept``, which restores the driver's count afterwards."""
    import torch

    cap = max(1, int(slot.spec.resources.cpus))
    original = torch.set_num_threads
    torch.set_num_threads = lambda n: original(max(1, min(int(n), cap)))
    original(cap if slot.torch_threads is None else slot.torch_threads)
    try:
        yield
    finally:
        slot.torch_threads = torch.get_num_threads()
        torch.set_num_threads = original


class InlineRuntime(AttemptEndings, DriverSide):
    """The in-process backend of the Runtime protocol (see the module docstring for its rules)."""

    def __init__(self, *, ledger: Ledger, devices: DevicePool | None = None) -> None:
        self._ledger, self._devices = ledger, devices
        self._tally, self._counts, self._closed = Tally(), {"failed": 0, "dropped": 0}, False
        self._pool = _Slots()
        self._slots: dict[PoolKey, InlineSlot] = {}
        self._queue: deque[Any] = deque()  # Invocation or _Prewarm, in submission order (retries first)
        self._overran: set[str] = set()  # functions already logged for exceeding timeout_s
        self._changed = threading.Condition(threading.RLock())
        self._calling = threading.RLock()   # held by the inline thread around each job, by the driver in exclusive()
        self._thread = threading.Thread(target=self._loop, name="nimbus-inline", daemon=True)
        self._thread.start()

    # ---- public API -------------------------------------------------------------------------------

    def invoke(self, *, spec: FunctionSpec, request: Message) -> Future[Message]:
        """Queue one invocation; the future holds the accepted result or raises FunctionFailed."""
        invocation = Invocation(invocation_id=uuid.uuid4().hex, spec=spec, future=Future(), queued_at=time.time(),
                                body=encode(request, compress_min_bytes=None))
        self._submit(invocation)
        return invocation.future

    def map(self, *, spec: FunctionSpec, requests: list[Message]) -> list[Future[Message]]:
        """One invocation per request, queued in order."""
        return [self.invoke(spec=spec, request=request) for request in requests]

    def prewarm(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None:
        """Load ``spec``'s entrypoint (in queue order) unless already loaded: one ``prewarm`` ledger row per pool
        key, whatever ``count`` (there is one in-process worker). With ``wait_s``, wait for it that long."""
        if count < 1:
            return
        job = _Prewarm(spec=spec)
        self._submit(job)
        if wait_s is not None and threading.current_thread() is not self._thread:
            job.done.wait(timeout=wait_s)

    def preregister(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None:
        """A prewarm: nothing sleeps in process."""
        self.prewarm(spec=spec, count=count, wait_s=wait_s)

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Held, no job runs (the one in progress finishes first): for the driver's own work that shares process
        state with functions (an evaluation seeds torch's global RNG; runtime/base.py's ``between_calls``)."""
        return self._calling

    def bill_provisioned(self) -> None:
        """Nothing to bill: the driver is the only worker, so no capacity is provisioned (no idle time either)."""

    def set_shares(self, *, weights: dict[str, float]) -> None:
        """Accepted and ignored: one call at a time, in submission order (no fair share)."""

    def stats(self) -> RuntimeStats:
        with self._changed:
            totals = self._tally.totals()
            busy = [s for s in self._slots.values() if s.attempt is not None]
            return RuntimeStats(
                workers_alive=len(self._slots), workers_idle=len(self._slots) - len(busy), workers_asleep=0,
                busy_cpus=sum(s.spec.resources.cpus for s in busy), queued=len(self._queue),
                cold_starts=totals.cold_starts, warm_starts=totals.warm_starts, retries=totals.retries,
                failures=totals.failures, timeouts=totals.timeouts, failed_invocations=self._counts["failed"],
                dropped_results=0)

    def shutdown(self) -> None:
        """Cancel what is still queued, wait for the call in progress, close the Stores functions opened."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            pending = [job for job in self._queue if isinstance(job, Invocation)]
            self._queue.clear()
            self._changed.notify_all()
        for invocation in pending:
            invocation.future.cancel()
        if threading.current_thread() is not self._thread:  # shutdown() may come from a future's callback
            self._thread.join(timeout=60.0)
        close_function_stores()

    # ---- the inline thread ------------------------------------------------------------------------

    def _submit(self, job: Any) -> None:
        with self._changed:
            if self._closed:
                raise RuntimeError("InlineRuntime used after shutdown()")
            self._queue.append(job)
            self._changed.notify_all()

    def _loop(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                job = self._queue.popleft()
            try:
                with self._calling:
                    if isinstance(job, _Prewarm):
                        self._prewarm(job)
                    elif not job.future.cancelled():
                        self._run(self._attempt(job))
            except Exception as exc:  # noqa: BLE001 - a bug here must not leave a future pending forever
                log.exception("inline runtime: %s failed outside its function", getattr(job, "spec", job))
                if isinstance(job, Invocation):
                    resolve(job.future, error=exc)

    def _loaded(self, spec: FunctionSpec) -> bool:
        slot = self._slots.get((spec.name, spec.entrypoint, spec.resources))
        return slot is not None and slot.fn is not None

    def _slot(self, spec: FunctionSpec) -> tuple[InlineSlot, dict[str, Any] | None]:
        """The pool key's slot, loading its entrypoint first if needed (the cold start); the load error, if any."""
        key = (spec.name, spec.entrypoint, spec.resources)
        if self._loaded(spec):
            return self._slots[key], None
        slot = InlineSlot(spec=spec, worker_id=f"inline-{spec.name}", requested_at=time.time())
        try:
            with driver_state_kept():
                slot.fn = load_entrypoint(spec.entrypoint)
            error = None
        except Exception as exc:  # noqa: BLE001 - billed and retried, as a worker's failed import
            error = error_report(exc)
        slot.init_s = time.time() - slot.requested_at
        with self._changed:
            self._slots[key] = slot
        return slot, error

    def _prewarm(self, job: _Prewarm) -> None:
        if not self._loaded(job.spec):
            slot, error = self._slot(job.spec)
            now = time.time()
            with self._changed:
                self._record(slot, attempt=None, outcome="prewarm", start_at=now, end_at=now,
                             error_type=error["type"] if error else None)
        job.done.set()

    def _attempt(self, invocation: Invocation) -> list[Action]:
        """Run one attempt of ``invocation`` and end it (bill, then accept, retry or fail)."""
        spec = invocation.spec
        cold = not self._loaded(spec)
        slot, error = self._slot(spec)
        invocation.attempts += 1
        slot.attempt = Attempt(invocation=invocation, number=invocation.attempts, cold=cold,
                               dispatched_at=time.time())
        if error is not None:
            now = time.time()
            with self._changed:
                return self._end_attempt(slot, outcome="error", start_at=now, end_at=now, retire=True, error=error)
        if self._devices is not None and self._devices.needs(spec=spec):
            slot.attempt.lease = self._devices.acquire(spec=spec, now=time.time(),
                                                       invocation_id=invocation.invocation_id)
        result, report = self._call(slot=slot, attempt=slot.attempt)
        self._note_overrun(spec=spec, duration_s=report["end_at"] - report["start_at"])
        with self._changed:
            return self._end_attempt(slot, outcome=report["outcome"], start_at=report["start_at"],
                                     end_at=report["end_at"], retire=False, error=report["error"], message=result)

    def _call(self, *, slot: InlineSlot, attempt: Attempt) -> tuple[Message | None, dict[str, Any]]:
        """The function itself, as a worker runs it: codec in and out, driver state kept, no heartbeats."""
        invocation = attempt.invocation
        context = FunctionContext(worker_id=slot.worker_id, function=invocation.spec.name,
                                  invocation_id=invocation.invocation_id, attempt=attempt.number, cache=slot.cache,
                                  device=attempt.lease.device if attempt.lease is not None else None)
        liveness.install(send=None)
        with driver_state_kept(), slot_threads(slot):
            result, report = invoke_function(fn=slot.fn, context=context, request=decode(invocation.body, copy=True))
        if report["outcome"] != "ok":
            return None, report
        return decode(encode(result, compress_min_bytes=None), copy=True), report

    def _note_overrun(self, *, spec: FunctionSpec, duration_s: float) -> None:
        if duration_s > spec.timeout_s and spec.name not in self._overran:
            self._overran.add(spec.name)
            log.warning("inline: %s ran %.3f s, over timeout_s=%s (not enforced in process; logged once)",
                        spec.name, duration_s, spec.timeout_s)

    def _release_body(self, attempt: Attempt) -> None:
        attempt.invocation.body = b""  # the encoded request is no longer needed

    @staticmethod
    def _run(actions: list[Action]) -> None:
        for action in actions:
            action()
