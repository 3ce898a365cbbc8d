"""Fair share of one pool between workloads (ARTOS 3.3, 6.2): which queued invocation runs next.

Each workload has a weight (default 1). When CPUs free up, the next invocation is the oldest queued one
of the workload whose busy CPUs per unit of weight are lowest (ties: the one queued first), so over time
each backlogged workload holds CPUs in proportion to its weight and an idle workload's share goes to the
others (work-conserving). With no weights set the queue stays FIFO.

Example::

    fair_pick(queued=["a", "a", "b"], busy_cpus={"a": 2.0}, weights={"a": 1.0, "b": 1.0})  # → 2 (b's first)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nimbus.runtime.devices import DevicePool


def fair_pick(*, queued: Sequence[str], busy_cpus: Mapping[str, float], weights: Mapping[str, float]) -> int:
    """Index into ``queued`` (each entry the workload of one queued invocation, oldest first)."""
    if not weights or not queued:
        return 0
    best, best_load = 0, float("inf")
    seen: set[str] = set()
    for index, workload in enumerate(queued):
        if workload in seen:
            continue
        seen.add(workload)
        load = busy_cpus.get(workload, 0.0) / weights.get(workload, 1.0)
        if load < best_load:
            best, best_load = index, load
    return best


def next_index(*, queue: Iterable[Any], slots: Iterable[Any], weights: Mapping[str, float]) -> int:
    """The index of the next invocation to place, for a backend's queue of invocations and its worker slots
    (each with ``spec.workload``, ``spec.resources.cpus``; a slot with an ``attempt`` is busy). FIFO (0)
    without weights. The local and Ray runtimes both schedule with it."""
    if not weights:
        return 0
    busy: dict[str, float] = {}
    for slot in slots:
        if slot.attempt is not None:
            busy[slot.spec.workload] = busy.get(slot.spec.workload, 0.0) + slot.spec.resources.cpus
    return fair_pick(queued=[invocation.spec.workload for invocation in queue], busy_cpus=busy, weights=weights)


def next_placeable(*, queue: Sequence[Any], slots: Iterable[Any], weights: Mapping[str, float],
                   devices: DevicePool | None) -> int | None:
    """:func:`next_index`, except that while no device of ``devices`` (an on-demand pool, runtime/devices.py) is free,
    only among the queued invocations whose kind leases none; None when none is eligible (or the queue is empty).
    The local and simulated runtimes place with it."""
    if devices is None or devices.free() > 0:
        return next_index(queue=queue, slots=slots, weights=weights) if queue else None
    eligible = [i for i, invocation in enumerate(queue) if not devices.needs(spec=invocation.spec)]
    if not eligible:
        return None
    return eligible[next_index(queue=[queue[i] for i in eligible], slots=slots, weights=weights)]
