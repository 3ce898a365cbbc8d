"""Starting or joining Ray for the ``ray`` runtime — loopback-only unless an address is given.

``runtime.address``:

* ``local`` — start a private single-node Ray instance in this process (or reuse the one already
  initialised, e.g. by a test fixture). nimbus makes every Ray server of that instance (GCS,
  raylet, object manager, workers, dashboard agent) listen on 127.0.0.1 only: Ray's gRPC servers
  otherwise listen on all interfaces. The dashboard is off.
* ``auto`` — join the cluster that ``ray start`` started on this machine (``RAY_ADDRESS`` or the
  latest local session).
* ``<host>:<port>`` or ``ray://<host>:<port>`` — join that cluster. Naming a non-loopback address is
  the explicit setting that lets traffic leave this machine; the cluster's own security (Ray token
  auth, a private network) then applies (docs/cluster.md).

Example::

    started = connect_ray(address="local", num_cpus=2)    # True: we own it and shut it down
    ...
    if started:
        ray.shutdown()
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from nimbus.errors import ClusterError

log = logging.getLogger(__name__)
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray picks 127.0.0.1 as the node address


@dataclass(frozen=True)
class RayStart:
    """What ``connect_ray`` did: whether it started Ray (then the caller shuts it down) and how long it took."""

    started: bool
    seconds: float
    address: str


def force_loopback() -> None:
    """Make a Ray instance started from this process bind 127.0.0.1 only (before and after ``import ray``)."""
    os.environ[LOOPBACK_ENV] = "0"  # inherited by the GCS, raylet and worker processes
    if "ray" in sys.modules:  # already imported: its constant was read at import time
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False


def connect_ray(*, address: str, num_cpus: float | None = None, num_gpus: float | None = None,
                object_store_mb: int | None = None) -> RayStart:
    """Start (``local``) or join (``auto`` / an address) Ray; reuse an instance already initialised."""
    if address == "local":
        force_loopback()
    import ray

    if ray.is_initialized():
        return RayStart(started=False, seconds=0.0, address=address)
    started = time.perf_counter()
    try:
        if address == "local":
            ray.init(address="local", num_cpus=int(num_cpus) if num_cpus else os.cpu_count(), num_gpus=num_gpus,
                     object_store_memory=object_store_mb * 2**20 if object_store_mb else None,
                     _node_ip_address="127.0.0.1", include_dashboard=False, logging_level=logging.WARNING,
                     configure_logging=False)
        else:
            ray.init(address=address, logging_level=logging.WARNING, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"cannot {'start' if address == 'local' else 'join'} Ray at runtime.address="
                           f"{address!r}: {exc}") from None
    seconds = time.perf_counter() - started
    log.info("Ray %s in %.1f s: %s", "started" if address == "local" else "joined", seconds,
             ray.cluster_resources())
    return RayStart(started=True, seconds=seconds, address=address)


def descendants(root: int) -> list[int]:
    """Pids of every live descendant of ``root`` (from /proc; empty where there is no /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        found += children
        frontier += children
    return found


def start_local_ray(*, num_cpus: int, object_store_mb: int | None = None) -> RayStart:
    """A loopback-only local Ray instance (tests and benchmarks share one per module)."""
    return connect_ray(address="local", num_cpus=num_cpus, object_store_mb=object_store_mb)
