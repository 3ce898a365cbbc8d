"""The simulated runtime's workers: warm pools per pool key, cold starts, keep-alive and capacity, all in virtual time.

A worker is a ``SimWorker``: its function's warm ``cache`` (envs, models: real, as on a real worker), when it
was asked for and when its cold start ends (``ready_at``), and since when it idles. ``SimPool`` hands an
invocation the idle worker of its pool key (name, entrypoint, resources) that last served its affinity key,
else a new one (a cold start); an idle worker is reclaimed once it idled ``keep_alive_s`` (simulated), and with
``max_workers`` the longest-idle worker of any key makes room for a new one. ``capacity_cpus`` bounds the CPUs
of the attempts running at once (None: no bound — a cloud's limit is what the config says, not this machine's).

Example::

    pool = SimPool(capacity_cpus=4, max_workers=None, keep_alive_s=600, on_retire=lambda w, at: None)
    worker, cold = pool.take(spec=spec, affinity="rank-0", now_s=12.5, cold_start_s=1.2)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nimbus.runtime.attempts import Attempt, by_affinity
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.devices import DevicePool

PoolKey = tuple[str, str, Resources]


def pool_key(spec: FunctionSpec) -> PoolKey:
    return spec.name, spec.entrypoint, spec.resources


def simulated_devices(*, slots: int, kinds: frozenset[str]) -> DevicePool:
    """The simulated cluster's on-demand device pool (``devices.pool: on_demand``): ``slots`` devices
    (``devices.cpu_slots``), leased in simulated time. They are named ``cpu:i`` because the functions compute on
    this machine's CPU whatever the simulated device is; their duration is their kind's model."""
    return DevicePool(devices=tuple(f"cpu:{i}" for i in range(slots)), kinds=kinds)


@dataclass(eq=False)
class SimWorker:
    """One simulated worker (``AttemptEndings`` bills it as a worker: spec, worker_id, init_s, requested_at)."""

    spec: FunctionSpec
    worker_id: str
    requested_at: float
    ready_at: float
    init_s: float
    prewarm: bool = False
    idle_since: float | None = None   # None while it runs an attempt (or was never used: see ready_at)
    affinity: str | None = None
    served: int = 0                   # attempts started on it (the first one pays its model's first_call_s)
    cache: dict[str, Any] = field(default_factory=dict)
    attempt: Attempt | None = None


class SimPool:
    """Workers per pool key in virtual time (module docstring). ``on_retire(worker, at_s)``: a worker leaves."""

    def __init__(self, *, capacity_cpus: float | None, max_workers: int | None, keep_alive_s: float,
                 on_retire: Callable[[SimWorker, float], None]) -> None:
        self.capacity_cpus, self.max_workers, self.keep_alive_s = capacity_cpus, max_workers, keep_alive_s
        self.on_retire = on_retire
        self.slots: dict[str, SimWorker] = {}   # worker id → worker (``slots``: AttemptEndings' name)
        self.busy_cpus = 0.0
        self.now_s = 0.0   # the clock the pool last saw (retire and set_idle happen at it)
        self._spawned = 0

    def fits(self, *, spec: FunctionSpec) -> bool:
        """Whether an attempt of ``spec`` may start now under ``capacity_cpus`` (one always may on an idle pool)."""
        if self.capacity_cpus is None or self.busy_cpus <= 0:
            return True
        return self.busy_cpus + spec.resources.cpus <= self.capacity_cpus + 1e-9

    def take(self, *, spec: FunctionSpec, affinity: str | None, now_s: float,
             cold_start_s: float) -> tuple[SimWorker, bool]:
        """A worker for one attempt at ``now_s``, and whether it is a cold start; it counts as busy from now."""
        self.reclaim(now_s=now_s)
        idle = [w for w in self.slots.values() if w.attempt is None and pool_key(w.spec) == pool_key(spec)]
        cold = not idle
        worker = by_affinity(idle, affinity=affinity) if idle else self.spawn(spec=spec, now_s=now_s,
                                                                           init_s=cold_start_s, prewarm=False)
        worker.affinity = affinity if affinity is not None else worker.affinity
        worker.idle_since = None
        self.busy_cpus += spec.resources.cpus
        return worker, cold

    def spawn(self, *, spec: FunctionSpec, now_s: float, init_s: float, prewarm: bool) -> SimWorker:
        """A new worker asked for at ``now_s``, ready ``init_s`` later (room made first under ``max_workers``)."""
        if self.max_workers is not None and len(self.slots) >= self.max_workers:
            idle = sorted((w for w in self.slots.values() if w.attempt is None),
                          key=lambda w: (w.idle_since if w.idle_since is not None else w.ready_at, w.worker_id))
            if idle:
                self._retire(idle[0], at_s=now_s)
        self._spawned += 1
        worker = SimWorker(spec=spec, worker_id=f"sim-{spec.name}-{self._spawned}", requested_at=now_s,
                           ready_at=now_s + init_s, init_s=init_s, prewarm=prewarm, idle_since=now_s + init_s)
        self.slots[worker.worker_id] = worker
        return worker

    def reclaim(self, *, now_s: float) -> None:
        """Retire every worker that has idled ``keep_alive_s`` by ``now_s`` (at the moment its keep-alive ran out)."""
        for worker in sorted(self.slots.values(), key=lambda w: w.worker_id):
            if worker.attempt is None and worker.idle_since is not None and \
                    now_s - worker.idle_since > self.keep_alive_s:
                self._retire(worker, at_s=worker.idle_since + self.keep_alive_s)

    def has_room(self) -> bool:
        """Whether a new worker may start now: ``max_workers`` not reached, or an idle worker ``spawn`` can retire."""
        return self.max_workers is None or len(self.slots) < self.max_workers or \
            any(w.attempt is None for w in self.slots.values())

    # ---- AttemptEndings' ``_pool`` ----------------------------------------------------------------
    def retire(self, worker: SimWorker) -> None:
        """The worker's attempt killed it (death, timeout, failed import): it leaves now."""
        self._free(worker)
        self._retire(worker, at_s=self.now_s)

    def set_idle(self, worker: SimWorker) -> None:
        self._free(worker)
        worker.idle_since = self.now_s

    def _free(self, worker: SimWorker) -> None:
        if worker.attempt is not None:
            self.busy_cpus = max(0.0, self.busy_cpus - worker.spec.resources.cpus)
        worker.attempt = None

    def _retire(self, worker: SimWorker, *, at_s: float) -> None:
        if self.slots.pop(worker.worker_id, None) is not None:
            self.on_retire(worker, at_s)
