"""RayPool: the ``ray`` runtime's warm pool — which actors exist, their states, deadlines and resources.

Not thread-safe: its owner (RayRuntime) holds the lock of ``changed`` around every call. Ray's
completion callbacks for a starting actor's ``ready()`` go to ``on_ready(slot, future)``, which the
owner turns into an event for its monitor thread.

Room for a new actor: fewer than ``max_workers`` live actors, and the cluster's totals (CPU, GPU,
memory; refreshed every few seconds, so an autoscaled cluster is seen) cover what the live actors
hold plus the new one. If not, the longest-idle actor of *another* function is evicted.

Example::

    pool = RayPool(changed=threading.Condition(lock), max_workers=None, keep_alive_s=600, init_timeout_s=120,
                   worker_env={}, compress_min_bytes=1 << 20, on_ready=on_ready)
    slot = pool.start(spec=spec, prewarm=True)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nimbus.data.shm import PREFIX_ENV, run_prefix
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.janitor import JanitorClient
from nimbus.runtime.pool import eviction_victim, idle_of, same_pool
from nimbus.runtime.ray_cluster import descendants
from nimbus.runtime.ray_worker import FunctionWorker

log = logging.getLogger(__name__)
_RESOURCE_REFRESH_S = 5.0


@dataclass(eq=False)
class RaySlot:
    """The driver's record of one worker actor (mutable; owned by a RayPool)."""

    worker_id: str
    spec: FunctionSpec
    handle: Any
    prewarm: bool
    requested_at: float
    deadline: float  # monotonic: end of init (starting), of the timeout (busy) or of keep-alive (idle)
    need: dict[str, float]  # the Ray resources the actor holds
    state: str = "starting"  # starting | idle | busy | dead
    attempt: Any = None
    ref: Any = None  # the ObjectRef of the running attempt
    ready_ref: Any = None  # the ObjectRef of ready(), kept alive until it resolves
    init_s: float = 0.0
    affinity: str | None = None
    node_id: str | None = None
    pid: int | None = None


class RayPool:
    """See the module docstring."""

    def __init__(self, *, changed: threading.Condition, max_workers: int | None, keep_alive_s: float,
                 init_timeout_s: float, worker_env: dict[str, str], compress_min_bytes: int | None,
                 on_ready: Callable[[RaySlot, Any], None]) -> None:
        import ray

        self._ray = ray
        self.slots: dict[str, RaySlot] = {}
        self.max_workers = max_workers
        self.on_retire: Callable[[RaySlot], None] | None = None  # the owner bills a provisioned worker's time
        self.init_timeout_s = init_timeout_s
        self._changed, self._keep_alive_s = changed, keep_alive_s
        self._env = {PREFIX_ENV: run_prefix(), **worker_env}
        self._compress_min_bytes = compress_min_bytes
        self._on_ready = on_ready
        self._actor_class = ray.remote(FunctionWorker)
        self._next_id = 0
        self._totals: dict[str, float] = {}
        self._totals_at = -1e9
        self._warned_gpu = False
        self.scale = {"CPU": 1.0, "memory": 1.0}   # a private instance's fit (RayRuntime.fit_private_instance)
        # Handles retired under the runtime's lock, killed later without it (kill_retired): ray.kill waits for
        # Ray's io thread, which may be waiting for that lock to post a result — a deadlock under the lock.
        self._doomed: deque[Any] = deque()
        # P15: if the driver dies, the janitor kills this node's actors (and the Ray instance this driver
        # started: its agents outlive a SIGKILLed driver), then sweeps the run's shared memory.
        self._janitor = JanitorClient(prefix=run_prefix())
        self._local_node = ray.get_runtime_context().get_node_id()

    # ---- resources ---------------------------------------------------------------------------------

    def totals(self) -> dict[str, float]:
        now = time.monotonic()
        if now - self._totals_at > _RESOURCE_REFRESH_S:
            self._totals = dict(self._ray.cluster_resources())
            self._totals_at = now
        return self._totals

    def ray_resources(self, spec: FunctionSpec) -> dict[str, float]:
        """CPU, GPU (0 when the cluster has none) and memory bytes an actor of ``spec`` holds."""
        gpus = spec.resources.gpus
        if gpus and not self.totals().get("GPU"):
            if not self._warned_gpu:
                log.warning("the Ray cluster has no GPU: functions asking for GPUs run on CPU "
                            "(billed as their spec says)")
                self._warned_gpu = True
            gpus = 0.0
        return {"CPU": spec.resources.cpus * self.scale["CPU"], "GPU": gpus,
                "memory": spec.resources.memory_mb * 2.0**20 * self.scale["memory"]}

    def _fits(self, need: dict[str, float]) -> bool:
        totals = self.totals()
        for name, amount in need.items():
            held = sum(slot.need[name] for slot in self.slots.values())
            if amount and held + amount > totals.get(name, 0.0) + 1e-9:
                return False
        return True

    def make_room(self, *, spec: FunctionSpec) -> bool:
        """True if one more actor of ``spec`` may start, evicting longest-idle actors of other functions."""
        need = self.ray_resources(spec)
        while not (self._fits(need) and (self.max_workers is None or len(self.slots) < self.max_workers)):
            victim = eviction_victim(self.slots.values(), spec=spec)
            if victim is None:
                return False
            self.retire(victim)
        return True

    # ---- life cycle --------------------------------------------------------------------------------

    def start(self, *, spec: FunctionSpec, prewarm: bool) -> RaySlot:
        """Create the actor (call ``make_room`` first); ``on_ready`` fires when it has imported its function."""
        self._next_id += 1
        worker_id = f"{spec.name}-{self._next_id}"
        need = self.ray_resources(spec)
        threads = str(max(1, int(spec.resources.cpus)))
        env = {**self._env, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        requested_at = time.time()
        handle = self._actor_class.options(
            num_cpus=need["CPU"], num_gpus=need["GPU"], memory=int(need["memory"]), max_restarts=0,
            max_task_retries=0, max_concurrency=2).remote(  # 2: progress() beside invoke (P5)
            worker_id, spec.name, spec.entrypoint, requested_at, env, self._compress_min_bytes)
        slot = RaySlot(worker_id=worker_id, spec=spec, handle=handle, prewarm=prewarm, requested_at=requested_at,
                       deadline=time.monotonic() + self.init_timeout_s, need=need)
        self.slots[worker_id] = slot
        slot.ready_ref = handle.ready.remote()
        slot.ready_ref.future().add_done_callback(lambda future: self._on_ready(slot, future))
        self._changed.notify_all()
        return slot

    def track_ray_processes(self) -> None:
        """Hand the janitor every process of the Ray instance this driver started (GCS, raylet, agents)."""
        for pid in descendants(os.getpid()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"/ray/" in cmdline or cmdline.startswith(b"ray::"):
                self._janitor.track(pid=pid)

    def watch(self, slot: RaySlot) -> None:
        """A ready actor on this node: the janitor kills it if the driver dies before Ray does."""
        if slot.node_id == self._local_node and slot.pid:
            self._janitor.track(pid=slot.pid)

    def idle(self, *, spec: FunctionSpec) -> list[RaySlot]:
        """Idle actors of ``spec``'s pool, most recently used first."""
        return idle_of(self.slots.values(), spec=spec)

    def starting(self, *, spec: FunctionSpec) -> bool:
        return any(w.state == "starting" and same_pool(w.spec, spec) for w in self.slots.values())

    def set_busy(self, slot: RaySlot, *, timeout_s: float) -> None:
        slot.state = "busy"
        slot.deadline = time.monotonic() + timeout_s
        self._changed.notify_all()

    def set_idle(self, slot: RaySlot) -> None:
        slot.attempt, slot.ref = None, None
        slot.state = "idle"
        slot.deadline = time.monotonic() + self._keep_alive_s
        self._changed.notify_all()

    def retire(self, slot: RaySlot) -> None:
        """Take an actor out of service; ``kill_retired`` kills it (its resources return to the cluster)."""
        if slot.state == "dead":
            return
        slot.state, slot.attempt, slot.ref = "dead", None, None
        self.slots.pop(slot.worker_id, None)
        if slot.prewarm and self.on_retire is not None:
            self.on_retire(slot)
        if slot.node_id == self._local_node and slot.pid:
            self._janitor.untrack(pid=slot.pid)
        self._doomed.append(slot.handle)
        self._changed.notify_all()

    @property
    def has_retired(self) -> bool:
        return bool(self._doomed)

    def kill_retired(self) -> None:
        """Kill the retired actors. Call it WITHOUT the runtime's lock held (see ``_doomed``)."""
        while self._doomed:
            try:
                handle = self._doomed.popleft()
            except IndexError:  # another thread took the last one
                return
            try:
                self._ray.kill(handle, no_restart=True)
            except Exception as exc:  # noqa: BLE001 - already gone, or Ray is shutting down
                log.debug("kill %s: %s", handle, exc)

    def next_check_s(self, *, now: float) -> float:
        return max(0.001, min([1.0, *(w.deadline - now for w in self.slots.values())]))

    def close(self) -> None:
        for slot in list(self.slots.values()):
            self.retire(slot)
        self.kill_retired()
        self._janitor.stop()
