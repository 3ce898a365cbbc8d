"""P5 liveness on the ``ray`` runtime: the local backend's rule (runtime/local.py), by polling.

A Ray actor cannot push frames to the driver as a forked worker does, so the driver asks. The worker
actor (runtime/ray_worker.py) counts the progress beats of the attempt it runs (``nimbus.liveness.beat``,
at most one per ``heartbeat_s``) and answers ``progress()`` — on its second thread, beside the running
``invoke`` — with ``{invocation_id, attempt, beats}``. The driver polls every busy worker whose spec has
``heartbeat_s`` once per interval; a reply counts only if it names the attempt that worker runs now
and its count grew (a superseded attempt's, or a late reply, counts for nothing). A worker with no
counted beat for ``SILENT_BEATS`` intervals since its dispatch is stalled: the runtime names it,
kills the actor and retries the attempt, as the local backend does.

Example (what RayRuntime does, lock held)::

    liveness.watch(worker_id="learner-1", attempt=attempt, heartbeat_s=5.0)    # at dispatch
    for worker_id in liveness.due_polls(now=time.monotonic()): ...             # send progress.remote()
    liveness.heard(worker_id="learner-1", attempt=attempt, report=reply_header)
    stalled = liveness.stalled(now=time.monotonic())
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from nimbus.liveness import SILENT_BEATS


@dataclass(eq=False)
class _Watch:
    attempt: Any  # the runtime's Attempt: a reply counts only for this one
    heartbeat_s: float
    silent_at: float  # monotonic: stalled from here on, unless a beat is counted first
    poll_at: float
    beats_seen: int = 0
    poll_ref: Any = None  # the pending progress() ObjectRef, kept alive until it resolves


class RayLiveness:
    """The driver's heartbeat clocks for busy Ray workers (not thread-safe: the runtime's lock)."""

    def __init__(self) -> None:
        self._watches: dict[str, _Watch] = {}

    def watch(self, *, worker_id: str, attempt: Any, heartbeat_s: float | None) -> None:
        """A dispatch: the silence clock of ``attempt`` starts now (``heartbeat_s`` None: not watched)."""
        if heartbeat_s is None:
            self._watches.pop(worker_id, None)
            return
        now = time.monotonic()
        self._watches[worker_id] = _Watch(attempt=attempt, heartbeat_s=heartbeat_s, poll_at=now + heartbeat_s,
                                          silent_at=now + SILENT_BEATS * heartbeat_s)

    def forget_ended(self, *, running: dict[str, Any]) -> None:
        """Drop the watches of workers no longer running the watched attempt (``running``: id -> attempt)."""
        for worker_id, watch in list(self._watches.items()):
            if running.get(worker_id) is not watch.attempt:
                del self._watches[worker_id]

    def due_polls(self, *, now: float) -> list[str]:
        """Workers to ask for progress now (at most one poll in flight each)."""
        due = [worker_id for worker_id, w in self._watches.items() if w.poll_ref is None and now >= w.poll_at]
        for worker_id in due:
            self._watches[worker_id].poll_at = now + self._watches[worker_id].heartbeat_s
        return due

    def polling(self, *, worker_id: str, ref: Any) -> None:
        self._watches[worker_id].poll_ref = ref

    def heard(self, *, worker_id: str, attempt: Any, report: dict[str, Any] | None) -> bool:
        """A progress reply (None: the poll failed). True if it counted as a heartbeat of ``attempt``."""
        watch = self._watches.get(worker_id)
        if watch is None or watch.attempt is not attempt:
            return False
        watch.poll_ref = None
        if report is None or report.get("invocation_id") != attempt.invocation.invocation_id \
                or report.get("attempt") != attempt.number or int(report.get("beats", 0)) <= watch.beats_seen:
            return False
        watch.beats_seen = int(report["beats"])
        watch.silent_at = time.monotonic() + SILENT_BEATS * watch.heartbeat_s
        return True

    def stalled(self, *, now: float) -> list[str]:
        """Workers silent for SILENT_BEATS intervals (their watches are dropped: the caller kills them)."""
        stalled = [worker_id for worker_id, w in self._watches.items() if now >= w.silent_at]
        for worker_id in stalled:
            del self._watches[worker_id]
        return stalled

    def next_check_s(self, *, now: float) -> float:
        times = [t for w in self._watches.values() for t in (w.silent_at, w.poll_at)]
        return max(0.001, min([1.0, *(t - now for t in times)]))
