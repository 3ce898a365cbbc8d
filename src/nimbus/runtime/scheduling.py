"""How invocations meet workers on a pool: the scheduling rule the worker-pool backends share (local, Ray).

FIFO in fair-share order (runtime/fairshare.py), retries first (they were admitted earlier: attempts.py),
sticky by the request's ``_affinity``, never a worker the invocation was tried on while another would do,
a new worker only where the pool has room. A started worker bills its pre-warm, runs the cold attempt it
was started for, or parks. The backends differ in how they start, dispatch to and hear from a worker; this
module is where they agree, so a config schedules the same on either.

``PoolScheduling`` is mixed in beside ``AttemptEndings``; a backend provides ``_pool`` (``idle``,
``make_room``, ``start``, ``set_busy``, ``set_idle``, ``slots``), ``_queue``, ``_weights``, ``_closed``,
``_counts``, ``_tally``, ``_lock``, ``invoke`` and ``_dispatch`` (send the attempt; the actions to run
after the lock), and overrides the hooks it needs (``_next_index``, ``_drop_cancelled``, ``_place``,
``_wake``, ``_assign``, ``_park``).

Example::

    class MyRuntime(PoolScheduling, AttemptEndings):
        def _dispatch(self, worker): attempt = self._dispatching(worker); ...; return []
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

from nimbus.data.codec import Message
from nimbus.runtime.attempts import Action, Attempt, Invocation, by_affinity
from nimbus.runtime.base import FunctionSpec, RuntimeStats
from nimbus.runtime.fairshare import next_index


class PoolScheduling:
    """The scheduling rule and the calls the worker-pool backends answer alike (see the module docstring)."""

    def set_shares(self, *, weights: dict[str, float]) -> None:
        """Divide the pool between workloads by these weights (FunctionSpec.workload names them)."""
        with self._lock:
            self._weights = dict(weights)

    def map(self, *, spec: FunctionSpec, requests: list[Message]) -> list[Future[Message]]:
        """One invocation per request, queued in order."""
        return [self.invoke(spec=spec, request=request) for request in requests]

    def _stats(self, *, slots: list[Any], busy_cpus: float, workers_asleep: int) -> RuntimeStats:
        """The runtime's counters (lock held): its workers ``slots``, its tally, its queue."""
        totals = self._tally.totals()
        return RuntimeStats(
            workers_alive=len(slots), workers_idle=sum(w.state == "idle" for w in slots), workers_asleep=workers_asleep,
            busy_cpus=busy_cpus, queued=len(self._queue), cold_starts=totals.cold_starts,
            warm_starts=totals.warm_starts, retries=totals.retries, failures=totals.failures,
            timeouts=totals.timeouts, failed_invocations=self._counts["failed"],
            dropped_results=self._counts["dropped"])

    @staticmethod
    def _run(actions: list[Action]) -> None:
        """Run the actions collected under the lock (resolving futures), after it was released."""
        for action in actions:
            action()

    # ---- scheduling (lock held) -------------------------------------------------------------------

    def _schedule(self) -> list[Action]:
        """Place queued invocations on workers in fair-share order until one finds no worker: one already resolved
        (cancelled by its owner, or failed by a driver-side error: nobody waits for its result) is dropped, a placed
        one becomes an attempt of its worker, dispatched now if the worker is idle (a starting worker dispatches it
        once ready)."""
        actions: list[Action] = []
        while self._queue and not self._closed:
            index = self._next_index()
            if index is None:
                break
            invocation = self._queue[index]
            if invocation.future.done():
                del self._queue[index]
                self._drop_cancelled(invocation)
                continue
            worker = self._place(invocation)
            if worker is None:
                break
            del self._queue[index]
            self._assign(worker, invocation)
            if worker.state == "idle":
                actions += self._dispatch(worker)
        return actions

    def _next_index(self) -> int | None:
        """The queued invocation to place next (runtime/fairshare.py; None: none can be placed now)."""
        return next_index(queue=self._queue, slots=self._pool.slots.values(), weights=self._weights)

    def _drop_cancelled(self, invocation: Invocation) -> None:
        """A queued invocation was cancelled by its owner: free what its request holds."""

    def _place(self, invocation: Invocation) -> Any | None:
        """The worker of the invocation's next attempt: an idle one it was not tried on (the sticky one first,
        ``by_affinity``), else a stopped one woken (``_wake``), else a new one where the pool has room, else an
        idle one it was tried on; None: it waits."""
        spec = invocation.spec
        idle = self._pool.idle(spec=spec)
        fresh = [w for w in idle if w.worker_id not in invocation.tried]
        if fresh:
            return by_affinity(fresh, affinity=invocation.affinity)
        if (woken := self._wake(spec)) is not None:
            return woken
        if self._pool.make_room(spec=spec):
            return self._pool.start(spec=spec, prewarm=False)
        return idle[0] if idle else None

    def _wake(self, spec: FunctionSpec) -> Any | None:
        """A stopped (pre-registered) worker of ``spec``, woken; None where the backend has none."""
        return None

    def _assign(self, worker: Any, invocation: Invocation) -> None:
        """``invocation``'s next attempt runs on ``worker`` (cold if the worker is still starting)."""
        invocation.attempts += 1
        worker.attempt = Attempt(invocation=invocation, number=invocation.attempts, cold=worker.state == "starting")
        worker.affinity = invocation.affinity

    def _started(self, worker: Any, *, error: dict[str, Any] | None) -> list[Action]:
        """A starting worker is ready (``error``: its entrypoint failed to import). A pre-warm is billed; an
        import error ends the cold attempt (billed, retried elsewhere); else the worker runs the cold attempt
        it was started for, or parks (``_park``)."""
        now = time.time()
        if worker.prewarm:
            self._record(worker, attempt=None, outcome="prewarm", start_at=now, end_at=now,
                         error_type=error["type"] if error else None)
        if error is not None:
            return self._end_attempt(worker, outcome="error", start_at=now, end_at=now, retire=True, error=error)
        if worker.attempt is not None:
            return self._dispatch(worker)
        self._park(worker)
        return []

    def _park(self, worker: Any) -> None:
        """A ready worker with no attempt waits for work."""
        self._pool.set_idle(worker)

    def _dispatching(self, worker: Any) -> Attempt:
        """The worker's attempt is sent now: its function's ``timeout_s`` runs from here."""
        attempt: Attempt = worker.attempt
        attempt.dispatched_at = time.time()
        self._pool.set_busy(worker, timeout_s=attempt.invocation.spec.timeout_s)
        return attempt

    def _run_unlocked(self, actions: list[Action]) -> None:
        """From the monitor thread, which holds the lock: run ``actions`` with the lock released meanwhile."""
        self._lock.release()
        try:
            self._run(actions)
        finally:
            self._lock.acquire()
