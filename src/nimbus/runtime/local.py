"""LocalRuntime: warm worker processes on this machine, Lambda-like semantics, every attempt billed.

Decisions:

* **Workers** are processes forked from a pre-imported template (``start_method="fork_server"``,
  runtime/forkserver.py; ``preload`` names what the template imports) or fresh
  ``python -m nimbus.runtime.worker`` subprocesses (``"spawn"``), bound at start to one function
  (pool key: name, entrypoint, resources); runtime/pool.py's ``WorkerPool`` keeps their states.
  A request body too big to inline is written once into a driver-owned segment that every retry
  reuses and that is unlinked when the invocation ends. Results come back through the Channel
  (data/channel.py): one Inbox thread for all workers.
* **Scheduling** (one lock): strict FIFO; the head waits until ``busy cpus + its cpus <= capacity``
  (a function bigger than the machine runs alone rather than never). Placement prefers the most
  recently used idle worker of the same function that this invocation has not tried yet; otherwise a
  cold start, evicting the longest-idle worker of another function at ``max_workers``; otherwise an
  already-tried idle worker; otherwise it waits. Idle workers do not count against capacity.
  Retries go to the front of the queue.
* **Device pool** (``devices``, runtime/devices.py, ARTOS 4.3): an invocation whose kind leases a device
  is placed only while a device is free (other queued invocations go ahead meanwhile), holds its lease
  from placement to the end of its attempt, and learns the device as ``FunctionContext.device``.
* **Clocks**: an attempt's timeout runs from its dispatch to a ready worker; a cold start's import
  has its own limit (``init_timeout_s``). Missing either gets the worker SIGKILLed (outcome "timeout").
* **Exactly once**: a result is accepted only if it names the attempt its worker is running now;
  anything else (late, duplicate, superseded) is dropped and counted in ``stats().dropped_results``
  (its segment was already unlinked by the Inbox on arrival).
* ``shutdown()`` cancels pending futures, bills in-flight attempts as "cancelled", kills every worker
  and removes every channel segment the runtime and its workers made; segments of other parts
  (Store, Buffer) under the run prefix are theirs. If the driver dies without ``shutdown()``, the
  janitor (runtime/janitor.py) kills the workers and sweeps the whole run prefix (P15).

Example::

    runtime = LocalRuntime(ledger=Ledger(), capacity_cpus=4)
    spec = FunctionSpec(name="echo", entrypoint="nimbus.runtime.builtin:echo", timeout_s=5.0)
    runtime.prewarm(spec=spec, count=2, wait_s=10.0)
    assert runtime.invoke(spec=spec, request=Message(header={"x": 1})).result().header == {"x": 1}
    runtime.shutdown()
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

from nimbus.cost.ledger import Ledger, Tally
from nimbus.data.channel import DEFAULT_INLINE_MAX_BYTES, Envelope, Inbox, discard_body, header_frame, prepare_body
from nimbus.data.codec import DEFAULT_COMPRESS_MIN_BYTES, Message
from nimbus.data.shm import run_prefix
from nimbus.data.transport import send_frame
from nimbus.liveness import SILENT_BEATS
from nimbus.runtime.attempts import Action, Attempt, AttemptEndings, Invocation, new_invocation, resolve
from nimbus.runtime.base import DriverSide, FunctionSpec, RuntimeStats
from nimbus.runtime.devices import DevicePool
from nimbus.runtime.fairshare import next_placeable
from nimbus.runtime.pool import WorkerHandle, WorkerPool, WorkerSlot, same_pool
from nimbus.runtime.prewarm import SparesCapped
from nimbus.runtime.scheduling import PoolScheduling

log = logging.getLogger(__name__)


class LocalRuntime(PoolScheduling, AttemptEndings, DriverSide):
    """The embedded backend of the Runtime protocol (see the module docstring for its rules)."""

    def __init__(self, *, ledger: Ledger, capacity_cpus: float | None = None, max_workers: int | None = None,
                 keep_alive_s: float = 600.0, inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES,
                 compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES, init_timeout_s: float = 120.0,
                 start_method: str = "fork_server", preload: tuple[str, ...] = (),
                 devices: DevicePool | None = None) -> None:
        self._ledger = ledger
        self._devices = devices  # learner-side functions lease a device per attempt (None: no pool)
        self._capacity = float(capacity_cpus if capacity_cpus is not None else (os.cpu_count() or 1))
        self._inline_max_bytes = inline_max_bytes
        self._compress_min_bytes = compress_min_bytes
        self._init_timeout_s = init_timeout_s
        self._prefix = run_prefix()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._queue: deque[Invocation] = deque()
        self._weights: dict[str, float] = {}  # workload → fair-share weight (runtime/fairshare.py); empty: FIFO
        self._tally = Tally()  # this runtime's records (the ledger may be shared)
        self._counts = {"failed": 0, "dropped": 0}
        self._closed = False
        self._capped = SparesCapped()   # a pre-warm asking for more workers than max_workers: said once
        self._unanswered: set[Future] = set()   # every invocation's future until it resolves (_on_driver_error)
        self._inbox = Inbox(on_message=self._on_envelope, on_close=self._on_source_closed,
                            on_error=self._on_driver_error)
        self._pool = WorkerPool(
            inbox=self._inbox, changed=self._changed, prefix=self._prefix,
            max_workers=max_workers if max_workers is not None else max(1, math.ceil(2 * self._capacity)),
            keep_alive_s=keep_alive_s, init_timeout_s=init_timeout_s, inline_max_bytes=inline_max_bytes,
            compress_min_bytes=compress_min_bytes, on_spawned=self._on_spawned, start_method=start_method,
            preload=preload)
        self._pool.on_retire = self._on_retire   # provisioned capacity: bill a pre-warmed worker's last stretch
        self._monitor = threading.Thread(target=self._monitor_loop, name="nimbus-monitor", daemon=True)
        self._monitor.start()

    # ---- public API -------------------------------------------------------------------------------

    def invoke(self, *, spec: FunctionSpec, request: Message) -> Future[Message]:
        """Queue one invocation; the future holds the accepted result or raises FunctionFailed."""
        body = prepare_body(message=request, prefix=self._prefix, inline_max_bytes=self._inline_max_bytes,
                            compress_min_bytes=self._compress_min_bytes)
        invocation = new_invocation(spec=spec, request=request, body=body)
        with self._lock:
            if self._closed:
                discard_body(body=body)
                raise RuntimeError("LocalRuntime.invoke after shutdown()")
            self._queue.append(invocation)
            self._unanswered.add(invocation.future)
            actions = self._schedule()
        invocation.future.add_done_callback(self._unanswered.discard)
        self._run(actions)
        return invocation.future

    def prewarm(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None:
        """Spawn ``count`` workers for ``spec`` (billed as cold starts, outcome "prewarm").

        Starts what ``max_workers`` leaves room for and says so (once, at info level). With ``wait_s``, blocks until
        every starting worker of this function (these and earlier ones) is ready, or ``wait_s`` passed.
        """
        self._start_spares(what="prewarm", spec=spec, count=count, wait_s=wait_s, asleep=False)

    def preregister(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None:
        """Start ``count`` workers for ``spec`` that SIGSTOP themselves once ready (their start is billed, outcome
        "prewarm"; nothing while asleep) and are woken (SIGCONT) before any cold start when work needs them.
        ``wait_s`` as in ``prewarm``."""
        self._start_spares(what="preregister", spec=spec, count=count, wait_s=wait_s, asleep=True)

    def _start_spares(self, *, what: str, spec: FunctionSpec, count: int, wait_s: float | None, asleep: bool) -> None:
        """``count`` workers started ahead of work (billed "prewarm"), ``asleep`` ones preregistered; with
        ``wait_s``, wait until no worker of this function is still starting."""
        with self._lock:
            started = 0
            while started < count and not self._closed and self._pool.make_room(spec=spec):
                self._pool.start(spec=spec, prewarm=True).preregistered = asleep
                started += 1
            if started < count and not self._closed:
                self._capped.say(what=what, function=spec.name, started=started, asked=count,
                                 limit=f"max_workers={self._pool.max_workers}")
            if wait_s is not None:
                self._changed.wait_for(lambda: not any(w.state == "starting" and same_pool(w.spec, spec)
                                                       for w in self._pool.slots.values()), timeout=wait_s)

    def stats(self) -> RuntimeStats:
        with self._lock:
            slots = list(self._pool.slots.values())
            return self._stats(slots=slots, busy_cpus=self._pool.busy_cpus(),
                               workers_asleep=sum(w.state == "asleep" for w in slots))

    def shutdown(self) -> None:
        """Cancel pending work, kill every worker, remove every channel segment of this runtime."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            actions = [lambda inv=inv: inv.future.cancel() for inv in self._queue]
            for invocation in self._queue:
                discard_body(body=invocation.body)
            self._queue.clear()
            for worker in list(self._pool.slots.values()):
                actions += self._cancel_attempt(worker)
                self._pool.retire(worker)
        if threading.current_thread() is not self._monitor:  # shutdown() may come from a future's callback
            self._monitor.join(timeout=10.0)
        self._run(actions)
        self._pool.close()
        self._inbox.close()

    # ---- scheduling (lock held): runtime/scheduling.py's rule, with these -----------------------------

    def _next_index(self) -> int | None:
        """The queued invocation to place next (fair share); with a device pool and no free device, only among
        those that need none (None when every queued one waits for a device)."""
        return next_placeable(queue=self._queue, slots=self._pool.slots.values(), weights=self._weights,
                              devices=self._devices)

    def _drop_cancelled(self, invocation: Invocation) -> None:
        discard_body(body=invocation.body)

    def _assign(self, worker: WorkerSlot, invocation: Invocation) -> None:
        """The attempt, with a device leased when its function's kind needs one (runtime/devices.py)."""
        super()._assign(worker, invocation)
        if self._devices is not None and self._devices.needs(spec=invocation.spec):
            worker.attempt.lease = self._devices.acquire(spec=invocation.spec, now=time.time(),
                                                         invocation_id=invocation.invocation_id)

    def _place(self, invocation: Invocation) -> WorkerSlot | None:
        """None while the busy workers leave no room for the invocation's cpus (capacity_cpus), else
        the shared rule (runtime/scheduling.py)."""
        busy = self._pool.busy_cpus()
        if busy > 0 and busy + invocation.spec.resources.cpus > self._capacity + 1e-9:
            return None
        return super()._place(invocation)

    def _wake(self, spec: FunctionSpec) -> WorkerSlot | None:
        sleeping = self._pool.asleep(spec=spec)
        return self._pool.wake(sleeping[0]) if sleeping else None  # a pre-registered worker: warm, only stopped

    def _dispatch(self, worker: WorkerSlot) -> list[Action]:
        attempt = self._dispatching(worker)
        invocation = attempt.invocation
        self._pool.heard_from(worker, heartbeat_s=invocation.spec.heartbeat_s)
        tag = {"op": "invoke", "invocation_id": invocation.invocation_id, "attempt": attempt.number,
               "heartbeat_s": invocation.spec.heartbeat_s,
               "device": attempt.lease.device if attempt.lease is not None else None}
        try:
            send_frame(sock=worker.handle.sock, frame=header_frame(tag=tag, body=invocation.body))
        except OSError as exc:
            return self._kill_attempt(worker, error_type="WorkerDied", detail=f"cannot reach {worker.worker_id}: {exc}")
        return []

    # ---- attempt endings (lock held) --------------------------------------------------------------

    def _release_body(self, attempt: Attempt) -> None:
        discard_body(body=attempt.invocation.body)  # the request's segment, if it had one

    def _spawned_at(self, worker: WorkerSlot, *, now: float) -> float:
        return worker.handle.spawned_at if worker.handle else now  # still spawning: no time billed before now

    # ---- events: worker messages (Inbox thread), spawns (spawner thread) ----------------------------

    def _on_envelope(self, envelope: Envelope) -> None:
        with self._lock:
            worker, tag = self._pool.slots.get(envelope.source), envelope.tag
            attempt: Attempt | None = worker.attempt if worker else None
            if worker is not None and tag.get("op") == "ready" and worker.state == "starting":
                actions = self._on_ready(worker, tag)
            elif tag.get("op") == "heartbeat":
                if self._current(worker, tag):
                    self._pool.heard_from(worker, heartbeat_s=attempt.invocation.spec.heartbeat_s)
                return  # a beat changes no schedule
            elif tag.get("op") == "result" and self._current(worker, tag):
                if attempt.lease is not None:
                    attempt.lease.peak_bytes = tag.get("device_peak_bytes")
                actions = self._end_attempt(worker, outcome=tag["outcome"], start_at=float(tag["start_at"]),
                                            end_at=float(tag["end_at"]), retire=False, error=tag.get("error"),
                                            message=envelope.message)
            else:  # late, duplicate or superseded: its body was already unlinked by the Inbox
                self._counts["dropped"] += 1
                log.debug("dropped a stale message %s from %s", tag, envelope.source)
                actions = []
            actions += self._schedule()
        self._run(actions)

    def _on_driver_error(self, error: BaseException) -> None:
        """Recording a worker's message raised (the ledger cannot be written: a full disk). That result is lost and
        nothing would deliver it, so every invocation not answered yet fails with ``error``: the run stops at once
        instead of waiting for it."""
        log.debug("runtime: a worker's message could not be recorded (%s); failing every open invocation", error)
        for future in list(self._unanswered):
            resolve(future, error=error)

    @staticmethod
    def _current(worker: WorkerSlot | None, tag: dict[str, Any]) -> bool:
        """``tag`` names the attempt ``worker`` is running now (anything else is late or superseded)."""
        attempt: Attempt | None = worker.attempt if worker else None
        return (attempt is not None and worker.state == "busy" and tag.get("attempt") == attempt.number
                and tag.get("invocation_id") == attempt.invocation.invocation_id)

    def _on_ready(self, worker: WorkerSlot, tag: dict[str, Any]) -> list[Action]:
        worker.init_s = float(tag.get("init_s", 0.0))
        return self._started(worker, error=tag.get("error"))

    def _park(self, worker: WorkerSlot) -> None:
        """A ready worker with no attempt: a pre-registered one stops itself (SIGSTOP), any other idles."""
        if worker.preregistered:
            self._pool.put_to_sleep(worker)
        else:
            self._pool.set_idle(worker)

    def _on_source_closed(self, source: str, error: BaseException | None) -> None:
        with self._lock:
            worker = self._pool.slots.get(source)
            if worker is None:
                return
            detail = f"worker {source} died" + (f" after a bad frame: {error}" if error else "")
            actions = self._kill_attempt(worker, error_type="WorkerDied", detail=detail) + self._schedule()
        self._run(actions)

    def _on_spawned(self, worker_id: str, handle: WorkerHandle | None, error: BaseException | None) -> None:
        if handle is None:
            self._on_source_closed(worker_id, error)
            return
        with self._lock:
            self._pool.attach(worker_id=worker_id, handle=handle)

    # ---- monitor thread ---------------------------------------------------------------------------

    def _monitor_loop(self) -> None:
        with self._lock:
            while not self._closed:
                actions = self._check(time.monotonic()) + self._schedule()
                if actions:
                    self._run_unlocked(actions)
                    continue
                self._changed.wait(timeout=self._pool.next_check_s(now=time.monotonic()))

    def _stalled(self, worker: WorkerSlot) -> list[Action]:
        """P5: no progress heartbeat for SILENT_BEATS intervals: say which function, kill it, retry the attempt."""
        spec = worker.spec
        detail = (f"{spec.name} attempt {worker.attempt.number} on worker {worker.worker_id} sent no heartbeat for "
                  f"{SILENT_BEATS} x heartbeat_s={spec.heartbeat_s} s (stalled); killed")
        log.error("liveness: %s", detail)
        return self._kill_attempt(worker, error_type="Stalled", detail=detail)

    def _check(self, now: float) -> list[Action]:
        """Deadlines (timeouts, init limits, keep-alives) and workers that exited without EOF."""
        actions: list[Action] = []
        for worker in list(self._pool.slots.values()):
            if now >= worker.deadline and worker.state == "idle":
                self._pool.retire(worker)  # keep-alive over: reclaim
            elif now >= worker.deadline and worker.state == "starting":
                actions += self._kill_attempt(worker, error_type="InitTimeout", detail=(
                    f"worker {worker.worker_id} was not ready within init_timeout_s={self._init_timeout_s}"))
            elif now >= worker.deadline:
                actions += self._time_out(worker)
            elif worker.state == "busy" and worker.silent_at is not None and now >= worker.silent_at:
                actions += self._stalled(worker)
            elif self._pool.exited_silently(worker, now=now):
                actions += self._kill_attempt(worker, error_type="WorkerDied", detail=f"{worker.worker_id} exited")
        return actions
