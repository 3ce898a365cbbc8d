"""The on-demand device pool (ARTOS §4.3, "On-demand GPU Service"): learner-side functions lease a device
only while they run and release it after the update, so a few devices are time-multiplexed across learners
and workloads.

A pool is a fixed tuple of device names, each held by at most one invocation at a time: every visible CUDA
device (``cuda:0``...) or, with no GPU, ``cpu_slots`` CPU learner slots (``cpu:0``...), so the same pool
runs and is tested on every machine. Which functions lease is decided by their ``FunctionSpec.kind``
(``devices.kinds``; actors never lease). The runtime (runtime/local.py) takes a lease when it places an
invocation on a worker (so a cold worker's start counts as held), lets other queued invocations go ahead
while none is free, names the device in the invocation's tag (``FunctionContext.device``), and releases the
lease when the attempt ends, whatever its outcome; the attempt's ledger row carries ``device``,
``lease_start_at`` and ``lease_end_at`` beside its function, invocation id and workload.

Example::

    pool = DevicePool(devices=("cpu:0",), kinds=frozenset({"learner"}))
    lease = pool.acquire(spec=learner_spec, invocation_id="abc", now=time.time())   # None when all are held
    pool.release(lease=lease, now=time.time())
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nimbus.runtime.base import FunctionSpec

if TYPE_CHECKING:
    from nimbus.config.devices import DevicesConfig


@dataclass
class Lease:
    """One device held by one invocation's attempt. Times are ``time.time()`` seconds; ``end_at`` None while held."""

    device: str
    function: str
    invocation_id: str
    workload: str
    start_at: float
    end_at: float | None = None

    @property
    def held_s(self) -> float:
        return 0.0 if self.end_at is None else max(0.0, self.end_at - self.start_at)


def pool_devices(*, kind: str, cpu_slots: int, cuda_count: int | None = None) -> tuple[str, ...]:
    """The pool's device names: ``cuda:i`` for each visible GPU (kind cuda, or auto with a GPU), else ``cpu:i``
    for each of ``cpu_slots`` slots. ``cuda_count`` overrides ``torch.cuda.device_count()`` (tests)."""
    if kind != "cpu":
        if cuda_count is None:
            import torch
            cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if cuda_count > 0:
            return tuple(f"cuda:{i}" for i in range(cuda_count))
        if kind == "cuda":
            raise ValueError("devices.kind: cuda, but no CUDA device is visible (use auto or cpu)")
    return tuple(f"cpu:{i}" for i in range(cpu_slots))


class DevicePool:
    """Which devices are free, who holds the others, and the totals of every lease (thread-safe)."""

    def __init__(self, *, devices: tuple[str, ...], kinds: frozenset[str]) -> None:
        if not devices:
            raise ValueError("a device pool needs at least one device")
        self.devices = tuple(devices)
        self.kinds = frozenset(kinds)
        self._holders: dict[str, Lease | None] = dict.fromkeys(self.devices)
        self._lock = threading.Lock()
        self.leases_granted = 0
        self.held_s_by_workload: dict[str, float] = {}

    def needs(self, *, spec: FunctionSpec) -> bool:
        """True if invocations of ``spec`` must hold a device while they run."""
        return spec.kind in self.kinds

    def free(self) -> int:
        with self._lock:
            return sum(holder is None for holder in self._holders.values())

    def held(self) -> list[Lease]:
        with self._lock:
            return [holder for holder in self._holders.values() if holder is not None]

    def acquire(self, *, spec: FunctionSpec, invocation_id: str, now: float) -> Lease | None:
        """Lease the first free device to this invocation, or None when every device is held."""
        with self._lock:
            for device, holder in self._holders.items():
                if holder is None:
                    lease = Lease(device=device, function=spec.name, invocation_id=invocation_id,
                                  workload=spec.workload, start_at=now)
                    self._holders[device] = lease
                    self.leases_granted += 1
                    return lease
            return None

    def release(self, *, lease: Lease, now: float) -> Lease:
        """End ``lease`` (a second release of the same lease changes nothing) and free its device."""
        with self._lock:
            if self._holders.get(lease.device) is lease:
                self._holders[lease.device] = None
                lease.end_at = max(now, lease.start_at)
                self.held_s_by_workload[lease.workload] = self.held_s_by_workload.get(lease.workload, 0.0) + lease.held_s
            return lease


def device_pool(*, config: "DevicesConfig") -> DevicePool | None:
    """The pool ``devices:`` asks for, or None for ``pool: none``."""
    if config.pool == "none":
        return None
    return DevicePool(devices=pool_devices(kind=config.kind, cpu_slots=config.cpu_slots), kinds=frozenset(config.kinds))
