"""SimulatedRuntime (``runtime.backend: simulated``): the real functions, in the driver, on a virtual clock.

A discrete-event simulation of a serverless cluster whose learning is real (docs/simulated.md):

* **Clock**: ``now_s()`` is simulated seconds since the runtime started; it moves only when the driver waits.
  The driver is instantaneous: whatever it does between two waits happens at one simulated moment.
* **Invocations**: ``invoke`` queues (FIFO, retries first); when the driver next waits, queued invocations
  take workers while ``capacity_cpus`` allows (simulated_pool.py: warm by pool key and affinity, else a cold
  start of ``cold_start_s``) and start at ``max(now, worker ready)``. An attempt *executes for real at its
  simulated start*, in simulated-start order: it reads its inputs then (the weights its request names, the Store
  as it is at that moment); its duration is drawn from its kind's model (simulated_durations.py) and its result
  is delivered at start + duration.
* **Waiting**: ``SimEvents.get`` (the workflow's event queue, ``event_queue()``) and ``SimFuture.result`` advance
  the clock event by event (starts and ends, in time order, ties in the order they were scheduled) until a
  future resolves; nothing sleeps. ``SimEvents.get(timeout=t)`` waits at most ``t`` simulated seconds: with no
  result delivered by then, the clock stands at now + ``t`` and it raises ``queue.Empty``, as a real wait would
  time out (so a workflow's time triggers, polled after each wait, fire on time).
* **Endings**: as every backend (attempts.py): billed once in simulated seconds (``start_at``/``end_at``/
  ``queued_at`` are simulated, from 0), then accepted, retried or failed. A simulated death (``failure_fraction``:
  the function ran, its reply is lost, its worker retired) and a simulated duration over ``timeout_s`` are
  retried like a worker's; a function's real exception is its error. A function's Store writes are visible from
  its simulated start (workflows name the versions they read, so none reads a version before its producer ended).
* **Timings**: a result header's own ``*_s`` numbers are replaced by simulated ones (simulated_timings); a Nitro
  learner's ``probe_s`` is drawn from the ``probe`` kind's model when one is named (with_probe).
* **Timers**: ``call_later(delay_s=, callback=)`` runs ``callback`` in the driver once the clock reaches now +
  ``delay_s`` (an event like a start or an end; a cancelled timer's event is dropped without moving the clock): what
  a real backend does with a timer thread (ARTOS's pre-warm trigger, runtime/prewarm.py).
* **Determinism**: invocation and worker ids count up, draws come from one generator seeded by (run seed,
  ``simulation.seed``) in start order, functions run under ``driver_state_kept``: same config, same run.
* **Threads**: functions run with torch at one thread (``single_threaded``), a learner's ``torch_threads`` too.
* **Shared pool**: ``set_shares`` weights pick the next queued invocation by fair share and ``devices`` (an
  on-demand pool, simulated_pool.simulated_devices) leases learner-side kinds a device from placement to end, in
  simulated seconds, as the local backend does (run/workloads.py runs several workloads on one such runtime).
* **Not done**: heartbeats; one driver thread only.

Example::

    runtime = SimulatedRuntime(ledger=Ledger(), simulation=SimulationConfig(), capacity_cpus=None,
                               max_workers=None, keep_alive_s=600.0, seed=0)
    spec = FunctionSpec(name="echo", entrypoint="nimbus.runtime.builtin:echo")
    assert runtime.invoke(spec=spec, request=Message(header={"x": 1})).result().header["x"] == 1
    runtime.now_s()     # 2.0 simulated seconds (the default model: a 1 s cold start, then 1 s), whatever it took
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nimbus import liveness
from nimbus.config.simulation import DurationModel, SimulationConfig
from nimbus.cost.ledger import Ledger, Tally
from nimbus.data.codec import Message, decode, encode
from nimbus.data.stores import close_function_stores
from nimbus.runtime.attempts import AFFINITY_KEY, Attempt, AttemptEndings, Invocation
from nimbus.runtime.base import DriverSide, FunctionContext, FunctionSpec, RuntimeStats
from nimbus.runtime.devices import DevicePool
from nimbus.runtime.fairshare import next_placeable
from nimbus.runtime.inline import driver_state_kept
from nimbus.runtime.prewarm import SparesCapped
from nimbus.runtime.simulated_durations import check_bounded, draw_attempt, rows_of, simulated_timings, with_probe
from nimbus.runtime.simulated_pool import PoolKey, SimPool, SimWorker, pool_key
from nimbus.runtime.simulated_waits import SimEvents, SimFuture, SimTimer, single_threaded
from nimbus.runtime.worker import error_report, invoke_function, load_entrypoint

log = logging.getLogger(__name__)


@dataclass(order=True)
class _Event:
    at_s: float
    seq: int
    kind: str = field(compare=False)            # "start" | "end" | "timer"
    worker: SimWorker | None = field(compare=False)
    ending: dict[str, Any] = field(compare=False, default_factory=dict)
    timer: SimTimer | None = field(compare=False, default=None)


class SimulatedRuntime(AttemptEndings, DriverSide):
    """The simulated backend of the Runtime protocol (module docstring)."""

    def __init__(self, *, ledger: Ledger, simulation: SimulationConfig, capacity_cpus: float | None,
                 max_workers: int | None, keep_alive_s: float, seed: int, devices: DevicePool | None = None) -> None:
        self._ledger, self._tally, self._closed = ledger, Tally(), False
        self._devices, self._weights = devices, {}   # the device pool and fair-share weights (both optional)
        self._counts = {"failed": 0, "dropped": 0}
        self._capped = SparesCapped()   # a pre-warm asking for more workers than max_workers: said once
        self._models, self._simulation = simulation.models(), simulation
        check_bounded(models=self._models, default=simulation.default)   # a longer one would livelock the driver
        self._probe = self._models["probe"] if "probe" in simulation.named_kinds() else None   # Nitro's probe part
        self._rng = np.random.default_rng([seed, simulation.seed])
        self._pool = SimPool(capacity_cpus=capacity_cpus, max_workers=max_workers, keep_alive_s=keep_alive_s,
                             on_retire=self._retired)
        self._queue: deque[Invocation] = deque()
        self._events: list[_Event] = []
        self._seq = itertools.count()
        self._ids = itertools.count()
        self._loaded: dict[PoolKey, Callable[..., Message]] = {}
        self._now = 0.0

    # ---- the clock ---------------------------------------------------------------------------------
    def now_s(self) -> float:
        """Simulated seconds since the runtime started."""
        return self._now

    def event_queue(self) -> SimEvents:
        """The queue a workflow's done-callbacks should feed: waiting on it advances the simulation."""
        return SimEvents(runtime=self)

    def _set_now(self, at_s: float) -> None:
        self._now = max(self._now, at_s)
        self._pool.now_s = self._now

    def call_later(self, *, delay_s: float, callback: Callable[[], None]) -> SimTimer:
        """Run ``callback`` (in the driver, while it waits) when the clock reaches now + ``delay_s``; the returned
        timer's ``cancel()`` drops it. A threading.Timer's part on the real backends."""
        timer = SimTimer(callback=callback)
        self._schedule(at_s=self._now + max(0.0, delay_s), kind="timer", worker=None, timer=timer)
        return timer

    def advance(self, *, until_s: float | None = None) -> bool:
        """Start what may start, then run events in time order until one resolves a future; False when nothing is
        in flight (no event left) or, with ``until_s``, when the next event comes after it."""
        while True:
            self._dispatch()
            if not self._events or (until_s is not None and self._events[0].at_s > until_s):
                return False
            if self._run_next():
                return True

    def _run_next(self) -> bool:
        """Pop the next event and run it at its moment (a cancelled timer is dropped and does not move the clock);
        True if it resolved a future."""
        event = heapq.heappop(self._events)
        if event.timer is not None and event.timer.cancelled:
            return False
        self._set_now(event.at_s)
        if event.kind == "start":
            self._execute(event.worker)
            return False
        if event.kind == "timer":
            event.timer.callback()
            return False
        return self._end(event)

    def wait_for(self, *, future: Future) -> None:
        """Advance until ``future`` is resolved; a future nothing will resolve is an error, not a hang."""
        while not future.done():
            if not self.advance():
                raise RuntimeError("simulated runtime: waiting on a result that nothing in flight will deliver")

    def idle(self, *, seconds: float) -> None:
        """The driver waited ``seconds`` with nothing in flight."""
        self._set_now(self._now + max(0.0, seconds))

    def _advance_to(self, at_s: float) -> None:
        """Run every event up to ``at_s`` (the driver waits until then), then set the clock there."""
        while True:
            self._dispatch()
            if not self._events or self._events[0].at_s > at_s:
                break
            self._run_next()
        self._set_now(at_s)

    # ---- public API --------------------------------------------------------------------------------
    def invoke(self, *, spec: FunctionSpec, request: Message) -> Future[Message]:
        """Queue one invocation at the current simulated moment; it starts when the driver next waits."""
        if self._closed:
            raise RuntimeError("SimulatedRuntime used after shutdown()")
        invocation = Invocation(invocation_id=f"sim-{next(self._ids):08d}", spec=spec, future=SimFuture(runtime=self),
                                queued_at=self._now, body=encode(request, compress_min_bytes=None),
                                affinity=request.header.get(AFFINITY_KEY))
        self._queue.append(invocation)
        return invocation.future

    def map(self, *, spec: FunctionSpec, requests: list[Message]) -> list[Future[Message]]:
        return [self.invoke(spec=spec, request=request) for request in requests]

    def prewarm(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None:
        """Start ``count`` more workers of ``spec``, as the local backend does (each a cold start, billed on its
        ``prewarm`` row, then provisioned; with ``runtime.max_workers`` full of busy workers, fewer); with ``wait_s``,
        the driver waits (virtually) until every worker of ``spec`` is ready, at most that long."""
        model = self._model(spec)
        ready = self._now
        for worker in [w for w in self._pool.slots.values() if pool_key(w.spec) == pool_key(spec)]:
            ready = max(ready, worker.ready_at)
        for started in range(max(0, count)):
            if not self._pool.has_room():
                self._capped.say(what="prewarm", function=spec.name, started=started, asked=count,
                                 limit=f"max_workers={self._pool.max_workers}, none idle")
                break
            self._load(spec)
            worker = self._pool.spawn(spec=spec, now_s=self._now, init_s=model.cold_start_s, prewarm=True)
            self._record(worker, attempt=None, outcome="prewarm", start_at=worker.ready_at, end_at=worker.ready_at,
                         error_type=None)
            ready = max(ready, worker.ready_at)
        if wait_s is not None:
            self._advance_to(min(ready, self._now + wait_s))

    def preregister(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None:
        self.prewarm(spec=spec, count=count, wait_s=wait_s)

    def set_shares(self, *, weights: dict[str, float]) -> None:
        """Workload → weight: queued invocations are placed by fair share (runtime/fairshare.py); empty: FIFO."""
        self._weights = dict(weights)

    def bill_provisioned(self) -> None:
        """Bill every provisioned worker's time up to the simulated now."""
        for worker in sorted(self._pool.slots.values(), key=lambda w: w.worker_id):
            self._bill_stretch(worker, now=self._now)

    def stats(self) -> RuntimeStats:
        totals, workers = self._tally.totals(), list(self._pool.slots.values())
        busy = [w for w in workers if w.attempt is not None]
        return RuntimeStats(workers_alive=len(workers), workers_idle=len(workers) - len(busy), workers_asleep=0,
                            busy_cpus=sum(w.spec.resources.cpus for w in busy), queued=len(self._queue),
                            cold_starts=totals.cold_starts, warm_starts=totals.warm_starts, retries=totals.retries,
                            failures=totals.failures, timeouts=totals.timeouts,
                            failed_invocations=self._counts["failed"], dropped_results=0)

    def shutdown(self) -> None:
        """Cancel what is queued or in flight (in flight: billed ``cancelled`` at now), close the functions' Stores."""
        if self._closed:
            return
        self._closed = True
        pending = list(self._queue)
        self._queue.clear()
        for worker in sorted({e.worker for e in self._events if e.worker is not None}, key=lambda w: w.worker_id):
            self._cancel(worker)
        self._events.clear()
        for invocation in pending:
            invocation.future.cancel()
        close_function_stores()

    # ---- starting and ending attempts ----------------------------------------------------------------
    def _model(self, spec: FunctionSpec) -> DurationModel:
        return self._simulation.model_for(kind=spec.kind, models=self._models)

    def _load(self, spec: FunctionSpec) -> Callable[..., Message]:
        key = pool_key(spec)
        if key not in self._loaded:
            with driver_state_kept():
                self._loaded[key] = load_entrypoint(spec.entrypoint)
        return self._loaded[key]

    def _schedule(self, *, at_s: float, kind: str, worker: SimWorker | None, ending: dict[str, Any] | None = None,
                  timer: SimTimer | None = None) -> None:
        heapq.heappush(self._events, _Event(at_s=at_s, seq=next(self._seq), kind=kind, worker=worker,
                                            ending=ending or {}, timer=timer))

    def _dispatch(self) -> None:
        """Give queued invocations workers, in queue order, while capacity allows; each starts when its worker is
        ready (now, or after its cold start)."""
        while (index := next_placeable(queue=self._queue, slots=self._pool.slots.values(), weights=self._weights,
                                       devices=self._devices)) is not None:
            invocation = self._queue[index]
            if invocation.future.cancelled():
                del self._queue[index]
                continue
            if not self._pool.fits(spec=invocation.spec):
                return
            del self._queue[index]
            worker, cold = self._pool.take(spec=invocation.spec, affinity=invocation.affinity, now_s=self._now,
                                           cold_start_s=self._model(invocation.spec).cold_start_s)
            invocation.attempts += 1
            start_at = max(self._now, worker.ready_at)
            worker.attempt = Attempt(invocation=invocation, number=invocation.attempts, cold=cold,
                                     dispatched_at=start_at)
            if self._devices is not None and self._devices.needs(spec=invocation.spec):   # held from placement
                worker.attempt.lease = self._devices.acquire(spec=invocation.spec, now=self._now,
                                                             invocation_id=invocation.invocation_id)
            self._schedule(at_s=start_at, kind="start", worker=worker)

    def _execute(self, worker: SimWorker) -> None:
        """The attempt's start: run the function for real now, draw its duration, schedule its end."""
        attempt = worker.attempt
        invocation, spec, start_at = attempt.invocation, attempt.invocation.spec, self._now
        try:
            fn = self._load(spec)
        except Exception as exc:  # noqa: BLE001 - a failed import: billed and retried, as a worker's
            self._schedule(at_s=start_at, kind="end", worker=worker, ending={
                "outcome": "error", "start_at": start_at, "retire": True, "error": error_report(exc), "after_s": 0.0})
            return
        context = FunctionContext(worker_id=worker.worker_id, function=spec.name,
                                  invocation_id=invocation.invocation_id, attempt=attempt.number, cache=worker.cache,
                                  device=attempt.lease.device if attempt.lease is not None else None)
        liveness.install(send=None)
        request = decode(invocation.body, copy=True)
        with driver_state_kept(), single_threaded():
            result, report = invoke_function(fn=fn, context=context, request=request)
        body = encode(result, compress_min_bytes=None) if report["outcome"] == "ok" else b""
        draw = draw_attempt(model=self._model(spec), rng=self._rng, rows=rows_of(request, result),
                            nbytes=len(invocation.body) + len(body), first_call=worker.served == 0)
        draw, parts = with_probe(draw=draw, model=self._probe, rng=self._rng,
                                 result=result if report["outcome"] == "ok" else None)
        worker.served += 1
        ending = self._ending(report=report, body=body, draw=draw, spec=spec, start_at=start_at, parts=parts)
        self._schedule(at_s=start_at + ending["after_s"], kind="end", worker=worker, ending=ending)

    @staticmethod
    def _ending(*, report: dict[str, Any], body: bytes, draw: Any, spec: FunctionSpec, start_at: float,
                parts: dict[str, float]) -> dict[str, Any]:
        """How the attempt will end: its real error, a simulated death or timeout, or its result."""
        if report["outcome"] != "ok":
            return {"outcome": "error", "start_at": start_at, "retire": False, "error": report["error"],
                    "after_s": min(draw.duration_s, spec.timeout_s)}
        if draw.dies and draw.dies_after_s < spec.timeout_s:
            return {"outcome": "worker_died", "start_at": start_at, "retire": True, "after_s": draw.dies_after_s,
                    "error": {"type": "WorkerDied", "retryable": True,
                              "traceback": "simulated worker death (simulation failure_fraction); its reply was lost"}}
        if draw.duration_s > spec.timeout_s:
            return {"outcome": "timeout", "start_at": start_at, "retire": True, "after_s": spec.timeout_s, "error": {
                "type": "FunctionTimeout", "retryable": True,
                "traceback": f"{spec.name}: simulated {draw.duration_s:.3f} s exceeded timeout_s={spec.timeout_s}"}}
        message = decode(body, copy=True)
        simulated_timings(header=message.header, duration_s=draw.duration_s, transfer_s=draw.transfer_s, parts=parts)
        return {"outcome": "ok", "start_at": start_at, "retire": False, "error": None, "message": message,
                "after_s": draw.duration_s}

    def _end(self, event: _Event) -> bool:
        """The attempt's end: bill it, free or retire its worker, settle its invocation; True if a future resolved."""
        worker, ending = event.worker, event.ending
        invocation = worker.attempt.invocation
        actions = self._end_attempt(worker, outcome=ending["outcome"], start_at=ending["start_at"], end_at=self._now,
                                    retire=ending["retire"], error=ending["error"], message=ending.get("message"))
        if not actions and not invocation.future.done():
            invocation.queued_at = self._now   # retried: queued again now, in simulated time
        for action in actions:
            action()
        return bool(actions)

    def _cancel(self, worker: SimWorker) -> None:
        """An attempt in flight at shutdown: billed ``cancelled`` from its start (or now) to now."""
        attempt = worker.attempt
        if attempt is None:
            return
        start_at = min(attempt.dispatched_at or self._now, self._now)
        self._release_lease(attempt)
        self._record(worker, attempt=attempt, outcome="cancelled", start_at=start_at, end_at=self._now, error_type=None)
        self._release_body(attempt)
        attempt.invocation.future.cancel()

    def _release_body(self, attempt: Attempt) -> None:
        attempt.invocation.body = b""

    def _release_lease(self, attempt: Attempt) -> None:
        """The attempt's device goes back to the pool at the simulated now."""
        if attempt.lease is not None and self._devices is not None:
            self._devices.release(lease=attempt.lease, now=self._now)

    def _retired(self, worker: SimWorker, at_s: float) -> None:
        """A worker left (reclaimed after keep-alive, killed, or evicted): its last provisioned stretch is billed."""
        if not self._closed:
            self._bill_stretch(worker, now=at_s)
        self._provisioned_since().pop(worker.worker_id, None)
