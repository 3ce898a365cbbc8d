"""``build(config)``: the one place where the whole system is connected. Read it top to bottom.

    config ─▶ Runtime (warm workers, ledger) ─▶ actor / learner FunctionSpecs
           ─▶ Store (weights, optimizer state) + StoreEvents
           ─▶ Buffer (algorithm's buffer spec) + replay strategy
           ─▶ actor-scaling controller (+ the Hessian probe it needs from the learner, nitro/probe.py)
           ─▶ Checkpointer, MetricsSink
    and the workflow binds triggers to actions over these parts (onpolicy/workflow.py).
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from nimbus.config import NimbusConfig, dump_config
from nimbus.config.rules import peak_actors
from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import load_pricing
from nimbus.data.shm import claim_run_prefix, release_run_prefix, sweep_orphans
from nimbus.data.stores import STORE_HEADER, driver_store, store_descriptor, store_worker_env
from nimbus.policy.build import build_policy, policy_data
from nimbus.policy.system import System
from nimbus.roles.specs import check_devices
from nimbus.run.registry import workflow_class, workflow_name
from nimbus.run.rundir import RunDirError
from nimbus.runtime.factory import StampedRuntime, make_runtime
from nimbus.types import Shared

log = logging.getLogger(__name__)
LEDGER_RECORDS_IN_MEMORY = 10_000  # a long run's driver stays flat (P13); costs are summed as records arrive


def make_run_dir(*, config: NimbusConfig, root: Path | None = None) -> Path:
    base = Path(root or config.output.root_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = base / f"{config.name}-{stamp}"
    suffix = 1
    while run_dir.exists():
        run_dir = base / f"{config.name}-{stamp}-{suffix}"
        suffix += 1
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:   # a read-only or unwritable root: bad input, before anything starts
        raise RunDirError(f"output.root_dir: cannot create the run directory {run_dir} "
                          f"({exc.strerror or exc})") from None
    return run_dir


def build(*, config: NimbusConfig, run_dir: Path) -> System:
    """A one-policy run: the policy ``main``'s data, the shared parts, then the functions its workflow class
    names (``train.workflow``; a population: pbt/population.py)."""
    workflow: Any = workflow_class(name=workflow_name(config=config))
    shm_prefix = claim_run_prefix()  # this run's own, before any segment or worker exists (workers inherit it)
    try:
        data = policy_data(config=config, replay_for=workflow.buffer_plan)
    except BaseException:
        release_run_prefix(prefix=shm_prefix)
        raise
    try:
        shared = build_shared(config=config, run_dir=run_dir, shm_prefix=shm_prefix)
    except BaseException:
        data.buffer.close(unlink=True)
        release_run_prefix(prefix=shm_prefix)
        raise
    return build_policy(config=config, shared=shared, run_dir=run_dir, policy="main", owns_shared=True,
                        functions=workflow.functions(config=config), data=data)


def pool_config(*, configs: list[NimbusConfig]) -> NimbusConfig:
    """The first config, its pool sized (unless runtime.max_workers is set) to keep the peak workers of every
    config sharing it warm at once (several workloads, a population's members): each has its own actors and
    learner, and evicting them would cold-start every round and restart the evicted actors' envs mid-episode."""
    first = configs[0]
    if first.runtime.max_workers is not None:
        return first
    needed = sum(peak_actors(scaling=config.actors.scaling) + 1 for config in configs)
    # a simulated run's pool is not this machine's: it repeats anywhere
    capacity = first.runtime.capacity_cpus or (0.0 if first.runtime.backend == "simulated"
                                               else float(os.cpu_count() or 1))
    runtime = first.runtime.model_copy(update={"max_workers": max(needed, int(2 * capacity))})
    return first.model_copy(update={"runtime": runtime})


def build_shared(*, config: NimbusConfig, run_dir: Path, shm_prefix: str | None = None,
                 pool: NimbusConfig | None = None) -> Shared:
    """The pool of workers, the ledger, the Store and pricing; ``shm_prefix``: the run's claimed prefix (claimed
    here when None); ``pool``: the config whose runtime section makes the pool (a population's: ``pool_config``),
    when not ``config``'s."""
    check_devices(config=config)   # before any worker (the multi-agent run builds no PolicyData)
    shm_prefix = shm_prefix or claim_run_prefix()
    swept = sweep_orphans()  # segments of drivers that died together with their janitor
    if swept:
        log.warning("removed %d shared-memory segments left by dead nimbus runs", swept)
    (run_dir / "config.yaml").write_text(dump_config(config=config))
    ledger = Ledger(path=run_dir / "ledger.jsonl", keep_in_memory=LEDGER_RECORDS_IN_MEMORY)  # the file has all
    backend = make_runtime(config=pool or config, ledger=ledger, worker_env=store_worker_env(config=config.store))
    try:  # the store after the runtime: the ray store lives in the Ray instance the runtime joined
        store = driver_store(config=config.store, namespace=run_namespace(run_dir=run_dir))
    except BaseException:
        backend.shutdown()
        raise
    runtime = StampedRuntime(inner=backend, headers={STORE_HEADER: store_descriptor(store)})  # functions open it
    pricing = load_pricing(path=Path(config.cost.pricing_path) if config.cost.pricing_path else None)
    return Shared(runtime=runtime, ledger=ledger, store=store, pricing=pricing, shm_prefix=shm_prefix,
                  release_prefix=release_run_prefix)


def run_namespace(*, run_dir: Path) -> str:
    """This run's name in a shared store (Redis keys, the Ray store directory): run dir + driver pid."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{run_dir.name}-{os.getpid()}")
