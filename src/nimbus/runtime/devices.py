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
from typing import TYPE_CHECKING, Any

from nimbus.runtime.base import FunctionSpec

if TYPE_CHECKING:
    import torch

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
    peak_bytes: int | None = None  # the attempt's peak device memory (torch.cuda.max_memory_allocated); None on CPU

    @property
    def held_s(self) -> float:
        return 0.0 if self.end_at is None else max(0.0, self.end_at - self.start_at)


def pool_devices(*, kind: str, cpu_slots: int, cuda_count: int | None = None,
                 learners_per_device: int = 1) -> tuple[str, ...]:
    """The pool's slots, one device name each: ``cuda:i`` for each visible GPU (kind cuda, or auto with a GPU),
    ``learners_per_device`` times over (several learners share one GPU), else ``cpu:i`` for each of
    ``cpu_slots`` slots. ``cuda_count`` overrides ``torch.cuda.device_count()`` (tests)."""
    if kind != "cpu":
        if cuda_count is None:
            import torch
            cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if cuda_count > 0:
            return tuple(f"cuda:{i}" for i in range(cuda_count) for _ in range(learners_per_device))
        if kind == "cuda":
            raise ValueError("devices.kind: cuda, but no CUDA device is visible (use auto or cpu)")
    return tuple(f"cpu:{i}" for i in range(cpu_slots))


class DevicePool:
    """Which slots are free, who holds the others, and the totals of every lease (thread-safe). A device named
    by several slots is shared by that many invocations at once."""

    def __init__(self, *, devices: tuple[str, ...], kinds: frozenset[str]) -> None:
        if not devices:
            raise ValueError("a device pool needs at least one device")
        self.devices = tuple(devices)
        self.kinds = frozenset(kinds)
        self._holders: list[Lease | None] = [None] * len(self.devices)
        self._lock = threading.Lock()
        self.leases_granted = 0
        self.held_s_by_workload: dict[str, float] = {}

    def needs(self, *, spec: FunctionSpec) -> bool:
        """True if invocations of ``spec`` must hold a device while they run."""
        return spec.kind in self.kinds

    def free(self) -> int:
        with self._lock:
            return sum(holder is None for holder in self._holders)

    def held(self) -> list[Lease]:
        with self._lock:
            return [holder for holder in self._holders if holder is not None]

    def acquire(self, *, spec: FunctionSpec, invocation_id: str, now: float) -> Lease | None:
        """Lease the first free slot's device to this invocation, or None when every slot is held."""
        with self._lock:
            for slot, holder in enumerate(self._holders):
                if holder is None:
                    lease = Lease(device=self.devices[slot], function=spec.name, invocation_id=invocation_id,
                                  workload=spec.workload, start_at=now)
                    self._holders[slot] = lease
                    self.leases_granted += 1
                    return lease
            return None

    def release(self, *, lease: Lease, now: float) -> Lease:
        """End ``lease`` (a second release of the same lease changes nothing) and free its slot."""
        with self._lock:
            for slot, holder in enumerate(self._holders):
                if holder is lease:
                    self._holders[slot] = None
                    lease.end_at = max(now, lease.start_at)
                    self.held_s_by_workload[lease.workload] = \
                        self.held_s_by_workload.get(lease.workload, 0.0) + lease.held_s
            return lease


def device_pool(*, config: DevicesConfig) -> DevicePool | None:
    """The pool ``devices:`` asks for, or None for ``pool: none``."""
    if config.pool == "none":
        return None
    return DevicePool(devices=pool_devices(kind=config.kind, cpu_slots=config.cpu_slots,
                                           learners_per_device=config.learners_per_device),
                      kinds=frozenset(config.kinds))


# ---- the function's side of a lease: use the leased device, leave it at release -------------------------

PLACED_KEY = "_device_placed_on"  # a warm cache's key: the device its models and optimizer state are on


def torch_device(*, leased: str | None, requested: str) -> torch.device:
    """The device a learner-side function computes on: the leased one when the pool gave one (``cpu:i`` slots
    are the CPU), else ``requested`` (``learner.device``; auto = cuda when present)."""
    import torch
    if leased is not None:
        return torch.device("cpu") if leased.startswith("cpu") else torch.device(leased)
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def place(*, cache: dict[str, Any], device: torch.device) -> bool:
    """Move every model, optimizer state and tensor held in ``cache`` (nested dicts and lists too) to ``device``;
    a no-op when the cache is already there. Returns whether anything was moved."""
    if cache.get(PLACED_KEY) == str(device):
        return False
    _move(value=cache, device=device)
    cache[PLACED_KEY] = str(device)
    return True


def _move(*, value: Any, device: torch.device) -> Any:
    import torch
    if isinstance(value, torch.nn.Module):
        return value.to(device)
    if isinstance(value, torch.optim.Optimizer):
        for state in value.state.values():  # Adam's 0-dim ``step`` stays where torch keeps it (the CPU)
            for name, tensor in state.items():
                if torch.is_tensor(tensor) and tensor.dim() > 0:
                    state[name] = tensor.to(device)
        return value
    if isinstance(value, torch.Tensor):
        return value if isinstance(value, torch.nn.Parameter) else value.to(device)
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = _move(value=item, device=device)
    elif isinstance(value, list):
        value[:] = [_move(value=item, device=device) for item in value]
    elif isinstance(value, tuple):
        return tuple(_move(value=item, device=device) for item in value)
    return value


def lease_started(*, device: str | None) -> None:
    """Before an invocation that holds a lease of ``device``: its peak memory is counted from here."""
    if device is not None and device.startswith("cuda"):
        import torch
        torch.cuda.reset_peak_memory_stats(device)


def lease_ended(*, device: str | None, cache: dict[str, Any]) -> int | None:
    """After the invocation: the peak device memory it held (None off CUDA), then its warm cache's models and
    optimizer state leave the device and the CUDA caching allocator returns its blocks, so the next
    workload leased this GPU finds it as before."""
    if device is None or not device.startswith("cuda"):
        return None
    import torch
    peak = int(torch.cuda.max_memory_allocated(device))
    place(cache=cache, device=torch.device("cpu"))
    torch.cuda.empty_cache()
    return peak
