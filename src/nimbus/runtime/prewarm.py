"""ARTOS's analytical workload monitor and actor pre-warming (003 §4.3, "Analytical Workload Monitor").

Per workload, two sliding windows (default 5): *actor_starts*, the average start-up time of the actor
workers started in a round (request → able to run: a cold attempt's ``start_at − queued_at``, a
pre-warmed worker's ``end_at − queued_at`` in the ledger), and *learner_fins*, the time from a round's
start (actors invoked) to its learner's finish. The workload is *stable* when the learner_fins window is
full and ``range < λ · mean`` (λ 0.2). Then a pre-warm trigger is set, relative to each round's start, at

    min(learner_fins) − max(actor_starts) − Δ_interval,   Δ_interval = range of (learner_fin_i − actor_start_i)

(the newest entries of the two windows paired), clamped at 0, so that actor workers are ready when the
learner finishes and the next round invokes them. nimbus fires no earlier than ``min(learner_fins) −
actor_starts[-1] − keep_alive_s / 2`` (``fire_delay_s``, the newest start-up sample): a worker pre-warmed
earlier would sit idle past its keep-alive and be reclaimed before the round it was warmed for (measured: a
2.1 s first start-up kept in the window clamped the threshold to 0 while later start-ups took 20 ms, and
every pre-warmed worker was reclaimed unused). When it fires, the controller asks the runtime to
pre-warm as many actor workers as will have been reclaimed by then: actors that finished more than
``keep_alive_s`` before the round's latest expected end (``max(learner_fins)``) lose their warm worker. A
trigger that fires while actors are still running waits for the last of them (onpolicy rounds: the learner's
update is what pre-warming overlaps).

**Ahead of a scale-up.** An actor scaler (Nitro, Hydrozoa, MARLess) decides the next round's count K at the end
of a round with k actors; ``scale_up(from_actors=k, to_actors=K)`` pre-warms the K − k workers it adds right
then, so they start while the driver does the round's end (metrics, controllers, checkpoint), and
``await_warm()``, called just before the next round's actors are invoked, waits (at most ``READY_WAIT_S``) until
every actor worker pre-warmed is ready: the invocations then take warm workers instead of starting more
(a starting worker is not handed work). The count is K − k: workers of an earlier, larger round still within
their keep-alive are not subtracted.

**Every workflow** (``make_prewarmer`` builds the controller from the config):

* ``onpolicy`` and ``marless``: a round is actors then learner(s); ``round_started`` when the actors are invoked,
  ``actor_finished`` per actor result, ``round_finished`` when the learning ends;
* ``stellaris``: a round ends when its batch is taken (``round_finished``), which is when the
  next round's actors are invoked (``round_started``): the learner finish that matters is the moment the actors
  are needed again;
* ``offpolicy``: actors run continuously and only ranks the pacer parks go idle. A round is one learner call:
  ``round_started(num_actors=parked ranks, idle_s=how long each has been parked)`` when it starts, so the
  trigger warms the parked ranks' workers the keep-alive will have reclaimed by the learner's expected finish
  (when the pacer releases them); ``round_finished`` at its result.

``prewarm.mode: none`` makes a controller that observes nothing and never fires. Workers are started through
``Runtime.prewarm(spec, n)``; pre-warmed workers are billed as provisioned capacity (cost/pricing.py).

**The runtime's clock** (``make_prewarmer``): the controller reads the runtime's clock (``now_s``) and sets its
trigger with the runtime's timer (``call_later``): real seconds and a ``threading.Timer`` (runtime/base.py
``DriverSide``), or on the simulated backend simulated seconds, the trigger an event on the virtual clock
(docs/simulated.md).

Example::

    monitor = WorkloadMonitor(window=5, stability=0.2)
    for start_s, fin_s in [(1.0, 4.0), (1.1, 4.1), (0.9, 4.0), (1.0, 3.9), (1.0, 4.0)]:
        monitor.observe(workload="w", actor_start_s=start_s, learner_fin_s=fin_s)
    monitor.threshold_s(workload="w")   # 3.9 - 1.1 - (3.1 - 2.9) = 2.6
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nimbus.runtime.base import thread_timer

log = logging.getLogger(__name__)


def is_stable(*, values: Sequence[float], window: int, stability: float) -> bool:
    """A full window whose range is below ``stability`` (λ) times its mean."""
    if len(values) < window:
        return False
    mean = sum(values) / len(values)
    return max(values) - min(values) < stability * mean


def prewarm_threshold_s(*, actor_starts: Sequence[float], learner_fins: Sequence[float]) -> float:
    """min(learner_fins) − max(actor_starts) − Δ_interval, Δ_interval the range of the paired differences
    (newest with newest), clamped at 0: seconds after a round's start at which to pre-warm."""
    pairs = list(zip(reversed(actor_starts), reversed(learner_fins)))
    intervals = [fin - start for start, fin in pairs]
    delta_interval = max(intervals) - min(intervals) if intervals else 0.0
    return max(0.0, min(learner_fins) - max(actor_starts) - delta_interval)


def fire_delay_s(*, threshold_s: float, actor_starts: Sequence[float], learner_fins: Sequence[float],
                 keep_alive_s: float) -> float:
    """The trigger's delay after a round's start: the threshold, but late enough that a worker started then (taking
    the newest start-up time) is idle for at most half its keep-alive before the expected learner finish."""
    return max(threshold_s, min(learner_fins) - actor_starts[-1] - keep_alive_s / 2)


def actors_to_warm(*, num_actors: int, actor_done_s: Iterable[float], keep_alive_s: float, next_start_s: float) -> int:
    """How many of ``num_actors`` workers will have been reclaimed (idle since ``actor_done_s`` longer than
    ``keep_alive_s``) by ``next_start_s``; all times on one clock. Actors that have not finished stay warm."""
    reclaimed = sum(1 for done in actor_done_s if done + keep_alive_s <= next_start_s)
    return max(0, min(num_actors, reclaimed))


def actor_start_samples(*, records: Iterable[Any], function: str) -> list[float]:
    """Start-up times of ``function``'s workers in ledger ``records``: pre-warmed workers (ready − requested) and
    cold attempts (function start − invocation queued). Warm attempts start nothing and give no sample."""
    samples = []
    for record in records:
        if record.function != function:
            continue
        stretch = getattr(record, "provisioned", False) and not record.cold   # provisioned time, not a start
        if record.outcome == "prewarm" and record.error_type is None and not stretch:
            samples.append(max(0.0, record.end_at - record.queued_at))
        elif record.cold and record.outcome == "ok":
            samples.append(max(0.0, record.start_at - record.queued_at))
    return samples


class WorkloadMonitor:
    """Sliding windows of actor start-up and learner finish times per workload (thread-safe)."""

    def __init__(self, *, window: int = 5, stability: float = 0.2) -> None:
        self.window, self.stability = window, stability
        self._starts: dict[str, deque[float]] = {}
        self._fins: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def observe(self, *, workload: str, learner_fin_s: float, actor_start_s: float | None = None) -> None:
        """One round: its learner finish time and, if any actor worker started, their average start-up time."""
        with self._lock:
            if actor_start_s is not None:
                self._starts.setdefault(workload, deque(maxlen=self.window)).append(actor_start_s)
            self._fins.setdefault(workload, deque(maxlen=self.window)).append(learner_fin_s)

    def windows(self, *, workload: str) -> tuple[list[float], list[float]]:
        """(actor_starts, learner_fins) of ``workload``, oldest first."""
        with self._lock:
            return list(self._starts.get(workload, ())), list(self._fins.get(workload, ()))

    def stable(self, *, workload: str) -> bool:
        _, fins = self.windows(workload=workload)
        return is_stable(values=fins, window=self.window, stability=self.stability)

    def threshold_s(self, *, workload: str) -> float | None:
        """When to pre-warm, in seconds after a round's start; None until stable with a start-up time known."""
        starts, fins = self.windows(workload=workload)
        if not starts or not is_stable(values=fins, window=self.window, stability=self.stability):
            return None
        return prewarm_threshold_s(actor_starts=starts, learner_fins=fins)


class SparesCapped:
    """Says that a pre-warm asked for more workers than the pool has room for (``max_workers``, or a Ray cluster's
    resources): the backend starts what fits and the rest start cold when invoked. Not a fault: the limit is the
    config's, or the default sized to the machine (a scaler may ask for 8 actors on a 2-core machine), so it is said
    at info level once per function, at debug after that (the trigger may fire every round)."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def say(self, *, what: str, function: str, started: int, asked: int, limit: str) -> None:
        level = logging.DEBUG if function in self._said else logging.INFO
        self._said.add(function)
        log.log(level, "%s %s: %d of %d workers started, no room for more (%s); the others start cold when invoked",
                what, function, started, asked, limit)


READY_WAIT_S = 30.0   # the longest a round waits for workers pre-warmed for it (a stuck start must not stall a run)


def make_prewarmer(*, config: Any, runtime: Any, ledger: Any, actor_spec: Any, workload: str) -> PrewarmController:
    """The controller ``config.prewarm`` asks for (``mode: none``: a disabled one), pre-warming ``actor_spec``'s
    workers on ``runtime`` and reading start-up times from ``ledger``; on the runtime's clock and timer where it has
    them (module docstring)."""
    cfg = config.prewarm
    return PrewarmController(
        clock=runtime.now_s, call_later=runtime.call_later,
        workload=workload, actor_function=actor_spec.name,
        monitor=WorkloadMonitor(window=cfg.window, stability=cfg.stability),
        keep_alive_s=config.runtime.keep_alive_s, enabled=cfg.mode == "monitor",
        prewarm=lambda count: runtime.prewarm(spec=actor_spec, count=count),
        records_since=lambda start: ledger.records(start=start),
        wait_warm=lambda wait_s: runtime.prewarm(spec=actor_spec, count=0, wait_s=wait_s))


class PrewarmController:
    """One workload's pre-warm trigger: a timer set at each round's start from the monitor's threshold.

    ``prewarm(n)`` starts ``n`` actor workers (the runtime's ``prewarm(spec, n)``); ``records_since(i)`` returns
    the workload's ledger rows from the ``i``-th on; ``enabled`` False (``prewarm.mode: none``) makes every
    method a no-op. ``wait_warm(wait_s)`` blocks until no pre-warmed worker is still starting. ``clock`` and
    ``call_later(delay_s=, callback=)`` (returns a timer with ``cancel()``) are the clock and the timer the trigger is
    set with. ``fired`` counts the triggers that fired, ``warmed`` the workers they asked for, ``scaled_up`` those
    asked for ahead of scale-ups."""

    def __init__(self, *, workload: str, actor_function: str, monitor: WorkloadMonitor, keep_alive_s: float,
                 prewarm: Callable[[int], None], records_since: Callable[[int], list[Any]],
                 enabled: bool = True, clock: Callable[[], float] = time.monotonic,
                 call_later: Callable[..., Any] = thread_timer,
                 wait_warm: Callable[[float], None] | None = None) -> None:
        self.workload, self.actor_function, self.monitor = workload, actor_function, monitor
        self.keep_alive_s, self.enabled = keep_alive_s, enabled
        self._prewarm, self._records_since, self._clock = prewarm, records_since, clock
        self._call_later = call_later
        self._lock = threading.Lock()
        self._timer: Any = None   # what call_later returned: a threading.Timer, or a simulated timer
        self._round_start: float | None = None
        self._actor_done: list[float] = []
        self._num_actors = 0
        self._seen = 0
        self._due = False  # the trigger fired before every actor had finished: act on the last one
        self._wait_warm = wait_warm
        self._awaiting = False  # workers were pre-warmed since the last await_warm()
        self.fired = 0
        self.warmed = 0
        self.scaled_up = 0

    def round_started(self, *, num_actors: int, idle_s: Sequence[float] = ()) -> None:
        """Actors are being invoked: arm the trigger if the workload is stable. ``idle_s``: actors of this round
        that are already idle (the offpolicy workflow's parked ranks), each with how long it has been."""
        if not self.enabled:
            return
        with self._lock:
            self._cancel()
            self._round_start, self._num_actors = self._clock(), num_actors
            self._actor_done = [self._round_start - seconds for seconds in idle_s]
            self._due = False
            threshold = self.monitor.threshold_s(workload=self.workload)
            if threshold is not None:
                starts, fins = self.monitor.windows(workload=self.workload)
                delay = fire_delay_s(threshold_s=threshold, actor_starts=starts, learner_fins=fins,
                                     keep_alive_s=self.keep_alive_s)
                self._timer = self._call_later(delay_s=delay, callback=self.fire)

    def actor_finished(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._actor_done.append(self._clock())
            due = self._due and len(self._actor_done) >= self._num_actors
        if due:
            self.fire()

    def round_finished(self) -> None:
        """The learner finished: disarm, and add this round's learner finish and actor start-up times."""
        if not self.enabled or self._round_start is None:
            return
        with self._lock:
            self._cancel()
            self._due = False
            fin_s = self._clock() - self._round_start
        try:
            records = self._records_since(self._seen)
        except LookupError:  # trimmed from memory: this round gives no start-up sample
            records = []
        self._seen += len(records)
        samples = actor_start_samples(records=records, function=self.actor_function)
        self.monitor.observe(workload=self.workload, learner_fin_s=fin_s,
                             actor_start_s=sum(samples) / len(samples) if samples else None)

    def fire(self) -> None:
        """The trigger: pre-warm the actor workers the keep-alive will have reclaimed by the learner's finish."""
        with self._lock:
            if self._round_start is None:
                return
            self._timer = None
            if len(self._actor_done) < self._num_actors:
                self._due = True  # actors still running: count them once the last one is done
                return
            self._due = False
            _, fins = self.monitor.windows(workload=self.workload)
            next_start = self._round_start + (max(fins) if fins else 0.0)
            count = actors_to_warm(num_actors=self._num_actors, actor_done_s=self._actor_done,
                                   keep_alive_s=self.keep_alive_s, next_start_s=next_start)
            self.fired += 1
            self.warmed += count
        self._start(count)

    def scale_up(self, *, from_actors: int, to_actors: int) -> int:
        """The scaler decided ``to_actors`` for the next round after ``from_actors``: pre-warm the workers it adds
        now (module docstring). Returns how many were asked for."""
        count = max(0, to_actors - from_actors)
        if not self.enabled or count == 0:
            return 0
        with self._lock:
            self.scaled_up += count
        self._start(count)
        return count

    def await_warm(self) -> None:
        """Just before actors are invoked: wait (at most READY_WAIT_S) for the workers pre-warmed since the last
        call to be ready, so the invocations take them rather than start more."""
        with self._lock:
            awaiting, self._awaiting = self._awaiting, False
        if awaiting and self._wait_warm is not None:
            try:
                self._wait_warm(READY_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - as in _start
                log.warning("waiting for pre-warmed %s workers failed: %s", self.actor_function, exc)

    def extras(self) -> dict[str, float]:
        """Counters for a metrics row (empty when disabled): workers asked for by the trigger and ahead of
        scale-ups, so far."""
        if not self.enabled:
            return {}
        return {"prewarm/warmed": float(self.warmed), "prewarm/scaled_up": float(self.scaled_up),
                "prewarm/fired": float(self.fired)}

    def _start(self, count: int) -> None:
        if count <= 0:
            return
        with self._lock:
            self._awaiting = True
        try:
            self._prewarm(count)
        except Exception as exc:  # noqa: BLE001 - a runtime shutting down; pre-warming is only an optimisation
            log.warning("prewarm of %d %s workers failed: %s", count, self.actor_function, exc)

    def close(self) -> None:
        with self._lock:
            self._cancel()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
