"""RayRuntime: the Runtime protocol on Ray — warm workers are Ray actors, placed by Ray by resources.

The same semantics as the local backend (runtime/local.py), so the same config runs on either:

* **Workers**: one Ray actor (runtime/ray_worker.py ``FunctionWorker``) per warm worker, bound at
  creation to one function (pool key: name, entrypoint, resources); creating one is a *cold start*
  (billed ``init_s``: request -> entrypoint imported). An actor holds its Ray resources for its
  whole life — ``num_cpus`` = cpus, ``num_gpus`` = gpus (0 on a cluster without GPUs, with one
  warning), ``memory`` = memory_mb — as a warm container holds its memory. Before a cold start the
  runtime checks the cluster's totals against what its live actors hold; when the new actor does
  not fit it evicts the longest-idle worker of another function (as local does at ``max_workers``),
  else the invocation waits. An idle actor is killed after ``keep_alive_s`` (reclaim).
* **Scheduling**: FIFO, retries first, sticky by the request's ``_affinity``, never a tried worker
  while another would do — the rule runtime/scheduling.py writes once for both backends; Ray places each
  actor on a node with room.
* **Bodies**: a request is encoded once and ``ray.put`` at ``invoke`` (the transfer starts as soon as
  the data is ready; every retry reuses the same object); a result is pulled to the driver by Ray's
  completion callback as soon as it exists, before anyone asks (push, as the Channel). Both are
  codec frames; Ray serialises only the byte array.
* **Clocks and failures**: an attempt's timeout runs from dispatch; past it the actor is killed
  (outcome ``timeout``, billed at least ``timeout_s``). A dead actor (its process killed, its node
  lost) ends the attempt as ``worker_died``. Both are retried on another worker up to
  ``max_retries``; errors raised by the function are retried unless marked not retryable.
* **Liveness (P5)**: the local rule — a busy worker whose spec has ``heartbeat_s`` and that counts no
  progress beat for ``SILENT_BEATS`` (3) intervals is named, killed (outcome ``timeout``, error
  ``Stalled``) and retried; the driver polls the actor for its beat count once per interval, and only
  the attempt it runs now counts (runtime/ray_liveness.py).
* **Exactly once**: a result is accepted only if it is the ObjectRef of the attempt its worker runs
  now; late or superseded results are dropped and counted (``stats().dropped_results``). The
  accepted result carries ``_invocation_id`` and ``_attempt``.
* **Ledger**: one ``attempt_record`` per attempt and per prewarm — the local backend's format.
* **Driver-side errors**: when handling an event raises (recording a result: the ledger cannot be written, a full
  disk), that result is lost and nothing would deliver it, so every invocation not answered yet fails with the error:
  the run stops at once instead of waiting (the local backend does the same through its Inbox's ``on_error``).
* ``shutdown()`` cancels what is pending, bills in-flight attempts as ``cancelled``, kills every
  actor, and shuts Ray down if this runtime started it (non-detached actors also die with the driver).

Ray callbacks only post events; one monitor thread owns all state changes.

Example::

    runtime = RayRuntime(ledger=Ledger(), address="local", capacity_cpus=2)
    spec = FunctionSpec(name="echo", entrypoint="nimbus.runtime.builtin:echo", timeout_s=5.0)
    assert runtime.invoke(spec=spec, request=Message(header={"x": 1})).result().header["x"] == 1
    runtime.shutdown()
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from nimbus.cost.ledger import Ledger, Tally
from nimbus.data.codec import DEFAULT_COMPRESS_MIN_BYTES, Message
from nimbus.liveness import SILENT_BEATS
from nimbus.runtime.attempts import Action, Attempt, AttemptEndings, Invocation, new_invocation, resolve
from nimbus.runtime.base import DriverSide, FunctionSpec, Resources, RuntimeStats
from nimbus.runtime.prewarm import SparesCapped
from nimbus.runtime.ray_cluster import connect_ray
from nimbus.runtime.ray_liveness import RayLiveness
from nimbus.runtime.ray_pool import RayPool, RaySlot
from nimbus.runtime.ray_worker import read_frame, split_result, to_frame
from nimbus.runtime.scheduling import PoolScheduling

log = logging.getLogger(__name__)


class RayRuntime(PoolScheduling, AttemptEndings, DriverSide):
    """The ``ray`` backend of the Runtime protocol (see the module docstring for its rules)."""

    def __init__(self, *, ledger: Ledger, address: str = "local", capacity_cpus: float | None = None,
                 max_workers: int | None = None, keep_alive_s: float = 600.0, init_timeout_s: float = 120.0,
                 compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES,
                 worker_env: dict[str, str] | None = None, resident: Resources | None = None) -> None:
        import ray

        self._ray = ray
        self.start = connect_ray(address=address, num_cpus=capacity_cpus)
        self._ledger, self._compress_min_bytes = ledger, compress_min_bytes
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._queue: deque[Invocation] = deque()
        self._weights: dict[str, float] = {}  # workload → fair-share weight (runtime/fairshare.py); empty: FIFO
        self._events: deque[Action] = deque()  # posted by Ray callbacks, run by the monitor under the lock
        self._tally, self._counts, self._closed = Tally(), {"failed": 0, "dropped": 0}, False
        self._unanswered: set[Future] = set()   # every invocation's future until it resolves (_on_driver_error)
        self._liveness = RayLiveness()
        self._capped = SparesCapped()   # a pre-warm asking for more actors than fit: said once
        self._pool = RayPool(changed=self._changed, max_workers=max_workers, keep_alive_s=keep_alive_s,
                             init_timeout_s=init_timeout_s, worker_env=dict(worker_env or {}),
                             compress_min_bytes=compress_min_bytes, on_ready=self._post_ready)
        self._pool.on_retire = self._on_retire   # provisioned capacity: bill a pre-warmed worker's last stretch
        if address == "local" and resident is not None:
            self.fit_private_instance(resident=resident)
        if self.start.started:
            self._pool.track_ray_processes()
        self._monitor = threading.Thread(target=self._monitor_loop, name="nimbus-ray-monitor", daemon=True)
        self._monitor.start()

    def fit_private_instance(self, *, resident: Resources) -> None:
        """Scale every function's Ray CPU and memory request so that ``resident`` (what the run keeps warm at once:
        its peak actors and learners) fits this private instance. A Ray actor holds its resources while idle, so
        on a 2-core machine the shipped PPO config (2 actors x 1 CPU + a 2-CPU learner) would otherwise evict a
        worker every round: a cold start each, and an actor's envs restarted mid-episode. The threads a function
        runs (``cpus``) and the bill are unchanged; on one machine Ray's resources are bookkeeping, not a cap."""
        totals = self._pool.totals()
        wanted = {"CPU": resident.cpus, "memory": resident.memory_mb * 2.0**20}
        for name, amount in wanted.items():
            if amount > totals.get(name, 0.0) > 0:
                self._pool.scale[name] = totals[name] / amount
        if self._pool.scale != {"CPU": 1.0, "memory": 1.0}:
            log.warning("runtime.address local: this private Ray instance has %.0f CPUs and %.1f GB for the run's "
                        "warm workers, which ask for %.1f CPUs and %.1f GB; each function's Ray request is scaled by "
                        "%.2f (CPU) and %.2f (memory) so they stay warm together (threads and bill per the config; "
                        "docs/cluster.md)", totals.get("CPU", 0.0), totals.get("memory", 0.0) / 2**30, resident.cpus,
                        resident.memory_mb / 1024, self._pool.scale["CPU"], self._pool.scale["memory"])

    # ---- public API -------------------------------------------------------------------------------

    def invoke(self, *, spec: FunctionSpec, request: Message) -> Future[Message]:
        """Queue one invocation; the future holds the accepted result or raises FunctionFailed."""
        body = self._ray.put(to_frame(request, compress_min_bytes=self._compress_min_bytes))
        invocation = new_invocation(spec=spec, request=request, body=body)
        with self._lock:
            if self._closed:
                raise RuntimeError("RayRuntime.invoke after shutdown()")
            self._queue.append(invocation)
            self._unanswered.add(invocation.future)
            self._changed.notify_all()
        invocation.future.add_done_callback(self._unanswered.discard)
        return invocation.future

    def prewarm(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None:
        """Start ``count`` actors for ``spec`` (billed as cold starts, outcome "prewarm"); with ``wait_s``,
        wait until every starting actor of this function is ready (or ``wait_s`` passed)."""
        with self._lock:
            started = 0
            while started < count and not self._closed and self._pool.make_room(spec=spec):
                self._pool.start(spec=spec, prewarm=True)
                started += 1
            if started < count and not self._closed:
                self._capped.say(what="prewarm", function=spec.name, started=started, asked=count,
                                 limit=f"the cluster's free resources, max_workers={self._pool.max_workers}")
            if wait_s is not None:
                self._changed.wait_for(lambda: not self._pool.starting(spec=spec), timeout=wait_s)

    def stats(self) -> RuntimeStats:
        with self._lock:
            slots = list(self._pool.slots.values())
            busy_cpus = sum(w.spec.resources.cpus for w in slots if w.attempt is not None)
            return self._stats(slots=slots, busy_cpus=busy_cpus, workers_asleep=0)

    def workers(self) -> dict[str, dict[str, Any]]:
        """Live workers: id -> {function, state, node_id, pid} (where Ray placed them)."""
        with self._lock:
            return {w.worker_id: {"function": w.spec.name, "state": w.state, "node_id": w.node_id, "pid": w.pid}
                    for w in self._pool.slots.values()}

    def shutdown(self) -> None:
        """Cancel pending work, kill every actor, shut Ray down if this runtime started it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            actions: list[Action] = [lambda inv=inv: inv.future.cancel() for inv in self._queue]
            self._queue.clear()
            for worker in list(self._pool.slots.values()):
                actions += self._cancel_attempt(worker)
                self._pool.retire(worker)
            self._changed.notify_all()
        if threading.current_thread() is not self._monitor:
            self._monitor.join(timeout=10.0)
        self._run(actions)
        self._pool.close()   # kills the retired actors, outside the lock
        if self.start.started and self._ray.is_initialized():
            self._ray.shutdown()

    # ---- scheduling (lock held): runtime/scheduling.py's rule, with these -----------------------------

    def _dispatch(self, worker: RaySlot) -> list[Action]:
        attempt = self._dispatching(worker)
        invocation = attempt.invocation
        ref = worker.handle.invoke.remote(invocation.body, invocation.invocation_id, attempt.number,
                                          invocation.spec.heartbeat_s)
        worker.ref = ref
        self._liveness.watch(worker_id=worker.worker_id, attempt=attempt, heartbeat_s=invocation.spec.heartbeat_s)
        ref.future().add_done_callback(
            lambda future, w=worker, r=ref: self._post(lambda: self._on_result(w, r, future)))
        return []

    # ---- events (posted by Ray's callback thread, run by the monitor) -------------------------------

    def _post(self, event: Action) -> None:
        with self._lock:
            self._events.append(event)
            self._changed.notify_all()

    def _guarded(self, step: Callable[[], list[Action] | None]) -> list[Action]:
        """One step of the monitor (an event, or the deadline checks and scheduling); when it raises, every open
        invocation fails with the error (``_on_driver_error``) at once, so that the scheduling which follows drops the
        queued ones instead of dispatching them, and the monitor goes on."""
        try:
            return step() or []
        except Exception as exc:  # noqa: BLE001 - handed to every caller waiting, never lost with the thread
            self._on_driver_error(exc)
            return []

    def _on_driver_error(self, error: BaseException) -> None:
        """Handling a result or a deadline raised (the ledger cannot be written: a full disk). A result may be lost
        with it and nothing would deliver it, so every invocation not answered yet fails with ``error``: the run
        stops at once instead of waiting for it."""
        log.debug("runtime: an event could not be handled (%s); failing every open invocation", error)
        for future in list(self._unanswered):
            resolve(future, error=error)

    def _post_ready(self, worker: RaySlot, future: Future) -> None:
        self._post(lambda: self._on_ready(worker, future))

    def _on_result(self, worker: RaySlot, ref: Any, future: Future) -> list[Action]:
        if worker.ref is not ref or worker.state != "busy" or worker.attempt is None:
            self._counts["dropped"] += 1  # late, duplicate or superseded
            return []
        worker.ref = None
        try:
            report, message = split_result(read_frame(future.result()))
        except self._ray.exceptions.RayActorError as exc:
            return self._kill_attempt(worker, error_type="WorkerDied",
                                      detail=f"worker {worker.worker_id} (pid {worker.pid}) died: {exc}")
        except Exception as exc:  # noqa: BLE001 - a task error outside the function (e.g. a bad frame)
            return self._end_attempt(worker, outcome="error", start_at=worker.attempt.dispatched_at or time.time(),
                                     end_at=time.time(), retire=True,
                                     error={"type": type(exc).__name__, "traceback": str(exc), "retryable": True})
        return self._end_attempt(worker, outcome=report["outcome"], start_at=float(report["start_at"]),
                                 end_at=float(report["end_at"]), retire=False, error=report.get("error"),
                                 message=message if report["outcome"] == "ok" else None)

    def _on_ready(self, worker: RaySlot, future: Future) -> list[Action]:
        if worker.state != "starting":
            return []  # retired meanwhile (init timeout, shutdown)
        try:
            report = read_frame(future.result()).header
        except Exception as exc:  # noqa: BLE001 - the actor died while starting
            return self._kill_attempt(worker, error_type="WorkerDied",
                                      detail=f"{worker.worker_id} died starting: {exc}")
        worker.init_s, worker.pid, worker.node_id = float(report["init_s"]), report["pid"], report["node_id"]
        self._pool.watch(worker)
        return self._started(worker, error=report.get("error"))

    # ---- liveness (P5; lock held) -------------------------------------------------------------------

    def _poll_progress(self, now: float) -> None:
        """Ask each busy watched worker for its beat count; the reply is an event for the monitor."""
        for worker_id in self._liveness.due_polls(now=now):
            worker = self._pool.slots[worker_id]
            ref = worker.handle.progress.remote()
            self._liveness.polling(worker_id=worker_id, ref=ref)
            ref.future().add_done_callback(lambda future, w=worker, a=worker.attempt: self._post(
                lambda: self._on_progress(w, a, future)))

    def _on_progress(self, worker: RaySlot, attempt: Attempt, future: Future) -> list[Action]:
        try:
            report = read_frame(future.result()).header
        except Exception:  # noqa: BLE001 - the actor died: its invoke's result reports that
            report = None
        self._liveness.heard(worker_id=worker.worker_id, attempt=attempt, report=report)
        return []

    def _stalled(self, now: float) -> list[Action]:
        """Watched workers silent for SILENT_BEATS intervals: named, killed, their attempts retried."""
        actions: list[Action] = []
        self._liveness.forget_ended(running={w.worker_id: w.attempt for w in self._pool.slots.values()
                                             if w.state == "busy"})
        for worker_id in self._liveness.stalled(now=now):
            worker = self._pool.slots[worker_id]
            detail = (f"{worker.spec.name} attempt {worker.attempt.number} on worker {worker_id} sent no heartbeat "
                      f"for {SILENT_BEATS} x heartbeat_s={worker.spec.heartbeat_s} s (stalled); killed")
            log.error("liveness: %s", detail)
            actions += self._kill_attempt(worker, error_type="Stalled", detail=detail)
        self._poll_progress(now)
        return actions

    # ---- monitor thread ---------------------------------------------------------------------------

    def _monitor_loop(self) -> None:
        with self._lock:
            while not self._closed:
                actions: list[Action] = []
                while self._events:
                    actions += self._guarded(self._events.popleft())
                actions += self._guarded(lambda: self._check(time.monotonic()) + self._schedule())
                if self._pool.has_retired:
                    actions.append(self._pool.kill_retired)  # outside the lock (RayPool._doomed)
                if actions:
                    self._run_unlocked(actions)
                    continue
                if not self._events:
                    now = time.monotonic()
                    self._changed.wait(timeout=min(self._pool.next_check_s(now=now),
                                                   self._liveness.next_check_s(now=now)))

    def _check(self, now: float) -> list[Action]:
        """Deadlines: keep-alive reclaim, init limits, function timeouts."""
        actions: list[Action] = []
        for worker in list(self._pool.slots.values()):
            if now < worker.deadline:
                continue
            if worker.state == "idle":
                self._pool.retire(worker)
            elif worker.state == "starting":
                actions += self._kill_attempt(worker, error_type="InitTimeout", detail=(
                    f"{worker.worker_id} was not ready within init_timeout_s={self._pool.init_timeout_s}; the cluster "
                    f"may have no node with {self._pool.ray_resources(worker.spec)} free"))
            elif worker.state == "busy":
                actions += self._time_out(worker)
        return actions + self._stalled(now)
