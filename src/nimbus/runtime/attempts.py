"""Invocations and attempts, shared by every runtime backend: one exactly-once settlement.

An invocation is tried up to ``1 + spec.max_retries`` times. Each attempt that ends is billed once
(P14), then settled: accepted (the first successful attempt; its result header names the invocation
and attempt so consumers can deduplicate, P2), retried (front of the queue: it was admitted earlier),
or failed with the original error type and traceback (P3). What is retried depends on the failure's kind
(runtime/faults.py ``failure_kind``): a dead, timed-out or stalled worker, a lost store key or an injected
fault up to ``max_retries``; an exception of the function's own code at most ``spec.retry_exceptions`` times
(default 0), and the failure then carries that first traceback; a fatal one never. Backends differ only in
how they run an attempt; this module is how an attempt ends, so the promises hold identically on every backend.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from nimbus.cost.ledger import Ledger, Tally, attempt_record, provisioned_record
from nimbus.data.codec import Message
from nimbus.data.request import AFFINITY_KEY  # request header key: route to the idle worker that last served it
from nimbus.data.result import INVOCATION_ID_KEY
from nimbus.errors import FunctionFailed
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.faults import APPLICATION, FATAL, INFRASTRUCTURE

# INVOCATION_ID_KEY (data/result.py) and ATTEMPT_KEY: the result header keys naming the accepted attempt
ATTEMPT_KEY = "_attempt"
Action = Callable[[], None]  # work to do after the runtime's lock is released (resolving futures)


@dataclass(eq=False)
class Invocation:
    invocation_id: str
    spec: FunctionSpec
    body: Any  # the request as the backend ships it (a channel Body locally, frame bytes on Ray)
    future: Future
    queued_at: float
    affinity: str | None = None
    attempts: int = 0
    tried: set[str] = field(default_factory=set)
    code_errors: list[dict[str, Any]] = field(default_factory=list)  # the function's own exceptions, in order


@dataclass(eq=False)
class Attempt:
    invocation: Invocation
    number: int
    cold: bool
    dispatched_at: float | None = None
    lease: Any = None  # the device pool's Lease this attempt holds (runtime/devices.py), if its kind leases


def by_affinity(idle: list[Any], *, affinity: str | None) -> Any:
    """Sticky routing: the worker that last served ``affinity``, else one bound to nothing, else the first.

    A warm worker keeps per-key state (an actor rank's envs mid-episode); routing the same key back to
    it keeps that state useful, as a long-lived actor would. It is a preference, never a wait.
    """
    if affinity is not None:
        for worker in idle:
            if worker.affinity == affinity:
                return worker
        for worker in idle:
            if worker.affinity is None:
                return worker
    return idle[0]


def new_invocation(*, spec: FunctionSpec, request: Message, body: Any) -> Invocation:
    """A fresh invocation of ``spec`` for ``request`` (``body``: the request as the backend ships it), queued now."""
    return Invocation(invocation_id=uuid.uuid4().hex, spec=spec, body=body, future=Future(), queued_at=time.time(),
                      affinity=request.header.get(AFFINITY_KEY))


def resolve(future: Future, *, value: Message | None = None, error: BaseException | None = None) -> None:
    try:
        future.set_exception(error) if error is not None else future.set_result(value)
    except InvalidStateError:
        pass  # cancelled by its owner meanwhile


def bill(*, ledger: Ledger, tally: Tally, worker: Any, attempt: Attempt | None, outcome: str, start_at: float,
         end_at: float, error_type: str | None) -> None:
    """One ledger row for an attempt (or, with ``attempt`` None, a worker's pre-warm)."""
    lease = attempt.lease if attempt else None
    record = attempt_record(
        spec=worker.spec, invocation_id=attempt.invocation.invocation_id if attempt else uuid.uuid4().hex,
        attempt=attempt.number if attempt else 0, worker_id=worker.worker_id,
        cold=attempt.cold if attempt else True, init_s=worker.init_s,
        queued_at=attempt.invocation.queued_at if attempt else worker.requested_at,
        start_at=start_at, end_at=end_at, outcome=outcome, error_type=error_type,
        device=lease.device if lease else "", lease_start_at=lease.start_at if lease else None,
        lease_end_at=lease.end_at if lease else None, device_peak_bytes=lease.peak_bytes if lease else None,
        provisioned=bool(getattr(worker, "prewarm", False)))   # a pre-warmed or pre-registered worker (ledger.py)
    ledger.append(record=record)
    tally.add(record=record)


def settle(*, attempt: Attempt, worker_id: str, outcome: str, error: dict[str, Any] | None, message: Message | None,
           closed: bool, queue: deque[Invocation], counts: dict[str, int]) -> Action | None:
    """Accept, retry or fail the invocation of an ended (already billed) attempt.

    Returns None when the invocation was queued again, else the action that resolves its future.
    """
    invocation = attempt.invocation
    if outcome != "ok":
        invocation.tried.add(worker_id)
        if retry_allowed(invocation=invocation, error=error) and not closed:
            invocation.queued_at = time.time()
            queue.appendleft(invocation)  # retries go first: they were admitted earlier
            return None
        message = None
        counts["failed"] += 1
    if message is not None:  # the accepted attempt: consumers deduplicate by invocation id (P2)
        message.header.update({INVOCATION_ID_KEY: invocation.invocation_id, ATTEMPT_KEY: attempt.number})
    failure = None if message is not None else failed(invocation=invocation, error=error)
    return lambda: resolve(invocation.future, value=message, error=failure)


def retry_allowed(*, invocation: Invocation, error: dict[str, Any]) -> bool:
    """Whether a failed attempt is tried again: never for a fatal error; at most ``spec.retry_exceptions`` times
    for the function's own exceptions (``kind`` application); else while retries are left (``max_retries``).
    A driver-side end (death, timeout, stall) carries no ``kind``: the platform failed, it is retried."""
    if not error["retryable"]:
        return False
    if error.get("kind") == APPLICATION:
        invocation.code_errors.append(error)
        if len(invocation.code_errors) > invocation.spec.retry_exceptions:
            return False
    return invocation.attempts <= invocation.spec.max_retries


def failed(*, invocation: Invocation, error: dict[str, Any]) -> FunctionFailed:
    """The invocation's failure: the first exception its function's code raised if any (later attempts may fail
    differently, e.g. on state the first one left), else the last attempt's error."""
    shown = invocation.code_errors[0] if invocation.code_errors else error
    retried = f"retry_exceptions={invocation.spec.retry_exceptions}" if invocation.code_errors else \
        f"max_retries={invocation.spec.max_retries}"
    return FunctionFailed(function=invocation.spec.name, invocation_id=invocation.invocation_id,
                          attempts=invocation.attempts, error_type=shown["type"], traceback_text=shown["traceback"],
                          kind=shown.get("kind", INFRASTRUCTURE if shown["retryable"] else FATAL), retried=retried)


class AttemptEndings:
    """How an attempt ends, the same on every backend (called with the backend's lock held): bill it,
    free or retire its worker, then accept, retry or fail its invocation; a driver-side end (timeout,
    death, stall) kills the worker and retries the attempt (``_kill_attempt``).

    A backend mixes this in and provides ``_ledger``, ``_tally``, ``_pool`` (``retire`` / ``set_idle``),
    ``_closed``, ``_queue`` and ``_counts``; ``_release_body`` frees what a request left behind once
    its invocation is settled (the local backend unlinks the request's segment); ``_spawned_at`` says
    when a worker that never got an attempt was asked for."""

    def _release_body(self, attempt: Attempt) -> None:
        pass

    def _spawned_at(self, worker: Any, *, now: float) -> float:
        """When ``worker`` was asked for (the start of an attempt killed before dispatch)."""
        return worker.requested_at

    def _release_lease(self, attempt: Attempt) -> None:
        """Give the attempt's device back to the pool (``_devices``, runtime/devices.py) before it is billed."""
        devices = getattr(self, "_devices", None)
        if attempt.lease is not None and devices is not None:
            devices.release(lease=attempt.lease, now=time.time())

    def _record(self, worker: Any, *, attempt: Attempt | None, outcome: str, start_at: float, end_at: float,
                error_type: str | None) -> None:
        bill(ledger=self._ledger, tally=self._tally, worker=worker, attempt=attempt, outcome=outcome,
             start_at=start_at, end_at=end_at, error_type=error_type)
        if attempt is None and outcome == "prewarm" and error_type is None:   # ready: provisioned from now on
            self._provisioned_since()[worker.worker_id] = end_at

    # ---- provisioned capacity (cost/ledger.py): pre-warmed and pre-registered workers' time, billed whole ----

    def bill_provisioned(self) -> None:
        """Write every provisioned worker's time since it was last billed (the workflows call this once a round,
        before reading the round's cost)."""
        with self._lock:
            now = time.time()
            for worker in list(self._pool.slots.values()):
                self._bill_stretch(worker, now=now)

    def _on_retire(self, worker: Any) -> None:
        """The pool retires ``worker`` (the pool's ``on_retire``): bill its last stretch, unless the runtime is
        shutting down (the run's cost was read already)."""
        if not self._closed:
            self._bill_stretch(worker, now=time.time())
        self._provisioned_since().pop(worker.worker_id, None)

    def _bill_stretch(self, worker: Any, *, now: float) -> None:
        since = self._provisioned_since().get(worker.worker_id)
        if since is None or now <= since:
            return
        record = provisioned_record(spec=worker.spec, worker_id=worker.worker_id, requested_at=worker.requested_at,
                                    start_at=since, end_at=now)
        self._ledger.append(record=record)
        self._tally.add(record=record)
        self._provisioned_since()[worker.worker_id] = now

    def _provisioned_since(self) -> dict[str, float]:
        """Worker id → when its provisioned time was last billed (created on first use: this is a mixin)."""
        if "_provisioned" not in self.__dict__:
            self._provisioned: dict[str, float] = {}
        return self._provisioned

    def _end_attempt(self, worker: Any, *, outcome: str, start_at: float, end_at: float, retire: bool,
                     error: dict[str, Any] | None = None, message: Message | None = None) -> list[Action]:
        """Bill the worker's attempt, free (or retire) the worker, then accept, retry or fail the invocation."""
        attempt: Attempt | None = worker.attempt
        self._pool.retire(worker) if retire else self._pool.set_idle(worker)
        if attempt is None:
            return []
        self._release_lease(attempt)
        self._record(worker, attempt=attempt, outcome=outcome, start_at=start_at, end_at=end_at,
                     error_type=error["type"] if error else None)
        action = settle(attempt=attempt, worker_id=worker.worker_id, outcome=outcome, error=error, message=message,
                        closed=self._closed, queue=self._queue, counts=self._counts)
        if action is None:
            return []
        self._release_body(attempt)
        return [action]

    def _kill_attempt(self, worker: Any, *, error_type: str, detail: str) -> list[Action]:
        """The driver ends the worker's attempt (timeout, death, init limit, stall): the worker is retired
        (killed), the attempt billed from its dispatch and retried."""
        now, attempt = time.time(), worker.attempt
        start_at = attempt.dispatched_at if attempt and attempt.dispatched_at else self._spawned_at(worker, now=now)
        outcome = "worker_died" if error_type == "WorkerDied" else "timeout"
        return self._end_attempt(worker, outcome=outcome, start_at=start_at, end_at=now, retire=True,
                                 error={"type": error_type, "traceback": detail, "retryable": True})

    def _time_out(self, worker: Any) -> list[Action]:
        """The worker's attempt ran past its function's ``timeout_s``: killed and retried."""
        return self._kill_attempt(worker, error_type="FunctionTimeout", detail=(
            f"{worker.spec.name} attempt {worker.attempt.number} exceeded timeout_s={worker.spec.timeout_s} "
            f"on worker {worker.worker_id}; killed"))

    def _cancel_attempt(self, worker: Any) -> list[Action]:
        attempt: Attempt | None = worker.attempt
        if attempt is None:
            return []
        now = time.time()
        self._release_lease(attempt)
        self._record(worker, attempt=attempt, outcome="cancelled", start_at=attempt.dispatched_at or now, end_at=now,
                     error_type=None)
        self._release_body(attempt)
        return [attempt.invocation.future.cancel]
