"""Several independent workloads on one pool of workers (ARTOS 3.3, 6.2): ``nimbus train a.yaml b.yaml``.

One driver, one runtime (the first config's ``runtime`` section is the pool's: backend, capacity,
workers); each workload keeps its own run directory, Store, buffer, metrics, checkpoints, summary and
cost (its policy is named after it, in the pool's one Store). Its functions are named ``<workload>/actor`` and ``<workload>/learner`` (its own warm workers) and
carry ``workload`` into every ledger row; the pool's ledger (``<root>/pool-<stamp>/ledger.jsonl``) has
every row, and each workload's ``ledger.jsonl`` its own, so their costs sum to the pool's. The pool
divides CPUs between workloads by ``runtime.share_weight`` (fair share, runtime/fairshare.py).
"""

from __future__ import annotations

import json
import os
import queue
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from nimbus.config import NimbusConfig, dump_config
from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import load_pricing
from nimbus.data.shm import claim_run_prefix, release_run_prefix
from nimbus.data.stores import STORE_HEADER, driver_store, store_descriptor, store_worker_env
from nimbus.errors import ConfigError
from nimbus.onpolicy.sync import SyncWorkflow
from nimbus.onpolicy.system import System
from nimbus.pbt.population import drive, start_workflow, tag_events
from nimbus.run.build import LEDGER_RECORDS_IN_MEMORY, _run_namespace, build_policy, make_run_dir, peak_actors
from nimbus.run.loop import (PREWARM_WAIT_S, TrainResult, _publish_initial, _should_stop, _summarise,
                                  save_checkpoint)
from nimbus.runtime.factory import StampedRuntime, make_runtime
from nimbus.types import Progress, RoundMetrics, Shared


def check_workloads(*, configs: list[NimbusConfig]) -> None:
    """Exit-2 rules: unique names; each a one-policy sync run; one pool (local or Ray) for all."""
    seen: set[str] = set()
    for i, config in enumerate(configs):
        where = f"workload {i + 1} ({config.name})"
        if config.name in seen:
            raise ConfigError(f"name: duplicate workload name {config.name!r} ({where}); give each config its own name")
        seen.add(config.name)
        if config.train.workflow != "sync" or config.policies or config.pbt is not None \
                or config.pipeline.minibatch or config.pipeline.dual_stage:
            raise ConfigError(f"train.workflow: {where}: several workloads on one pool run one-policy sync workloads")
        if (config.runtime.backend, config.runtime.address) != (configs[0].runtime.backend, configs[0].runtime.address):
            raise ConfigError(f"runtime.backend: {where}: every workload runs on the first one's pool "
                              f"({configs[0].runtime.backend}, address {configs[0].runtime.address!r})")


def _workload(*, config: NimbusConfig, runtime: Any, store: Any, pool_ledger: Ledger) -> System:
    """One workload's System: the policy is named after the workload (one Store for the pool)."""
    run_dir = make_run_dir(config=config)
    (run_dir / "config.yaml").write_text(dump_config(config=config))
    ledger = Ledger(path=run_dir / "ledger.jsonl", keep_in_memory=LEDGER_RECORDS_IN_MEMORY)
    pool_ledger.by_workload[config.name] = ledger
    shared = Shared(runtime=runtime, ledger=ledger, store=store,
                    pricing=load_pricing(path=Path(config.cost.pricing_path) if config.cost.pricing_path else None))
    system = build_policy(config=config, shared=shared, run_dir=run_dir, policy=config.name, owns_shared=False)
    system.actor_spec = replace(system.actor_spec, name=f"{config.name}/actor", workload=config.name)
    system.learner_spec = replace(system.learner_spec, name=f"{config.name}/learner", workload=config.name)
    return system


def _pool_config(*, configs: list[NimbusConfig]) -> NimbusConfig:
    """The first config, its pool sized (unless runtime.max_workers is set) to keep every workload's peak
    workers warm at once: each workload has its own warm workers, and evicting them would cold-start
    every round."""
    first = configs[0]
    if first.runtime.max_workers is not None:
        return first
    needed = sum(peak_actors(config=config) + 1 for config in configs)
    capacity = first.runtime.capacity_cpus or float(os.cpu_count() or 1)
    runtime = first.runtime.model_copy(update={"max_workers": max(needed, int(2 * capacity))})
    return first.model_copy(update={"runtime": runtime})


def train_workloads(*, configs: list[NimbusConfig]) -> list[TrainResult]:
    """Train every config to its own stop condition over one pool; one TrainResult per workload."""
    check_workloads(configs=configs)
    shm_prefix = claim_run_prefix()  # the pool's own segment prefix, before any worker starts
    pool_dir = make_run_dir(config=configs[0].model_copy(update={"name": "pool"}))
    pool_ledger = Ledger(path=pool_dir / "ledger.jsonl", keep_in_memory=LEDGER_RECORDS_IN_MEMORY)
    backend = make_runtime(config=_pool_config(configs=configs), ledger=pool_ledger,
                           worker_env=store_worker_env(config=configs[0].store))
    backend.set_shares(weights={config.name: config.runtime.share_weight for config in configs})
    events: queue.Queue[Any] = queue.Queue()
    systems: list[System] = []
    started = time.perf_counter()
    store = None
    try:
        store = driver_store(config=configs[0].store, namespace=_run_namespace(run_dir=pool_dir))
        runtime = StampedRuntime(inner=backend, headers={STORE_HEADER: store_descriptor(store)})
        systems = [_workload(config=config, runtime=runtime, store=store, pool_ledger=pool_ledger)
                   for config in configs]
        workflows: list[SyncWorkflow] = []
        for i, system in enumerate(systems):
            workflow = SyncWorkflow(system=system, progress=Progress(), on_round=lambda row: None)
            workflow.on_round = lambda row, s=system, w=workflow: _on_round(system=s, row=row, progress=w.progress)
            workflows.append(tag_events(workflow=workflow, events=events, tag=(i, 0)))
        for system in systems:
            _publish_initial(system=system)
            if system.config.runtime.prewarm:
                backend.prewarm(spec=system.learner_spec, count=1)
                backend.prewarm(spec=system.actor_spec, count=peak_actors(config=system.config), wait_s=PREWARM_WAIT_S)
                backend.prewarm(spec=system.learner_spec, count=0, wait_s=PREWARM_WAIT_S)

        def on_failure(i: int, error: Exception) -> None:
            raise error

        drive(workflows=workflows, events=events, generation=[0] * len(workflows),
              start=lambda i: start_workflow(workflows[i]),
              stop=lambda i: _should_stop(config=configs[i], progress=workflows[i].progress) is not None,
              on_failure=on_failure)
        wall_s = time.perf_counter() - started
        results = [_finish(system=s, workflow=w, wall_s=wall_s) for s, w in zip(systems, workflows)]
    finally:
        for system in systems:
            system.close()
        backend.shutdown()
        if store is not None:
            store.close()
        pool_ledger.close()
        release_run_prefix(prefix=shm_prefix)
    (pool_dir / "workloads.json").write_text(json.dumps(
        {"workloads": {config.name: str(result.run_dir) for config, result in zip(configs, results)},
         "wall_s": wall_s}, indent=1))
    for result, config in zip(results, configs):
        if config.output.report:
            from nimbus.report.render import render_report
            render_report(run_dir=result.run_dir)
    return results


def _on_round(*, system: System, row: RoundMetrics, progress: Progress) -> None:
    system.metrics.write(row=row, runtime={})
    every = system.config.train.checkpoint_every_rounds
    if row.round % every == every - 1:
        save_checkpoint(system=system, progress=progress)


def _finish(*, system: System, workflow: SyncWorkflow, wall_s: float) -> TrainResult:
    save_checkpoint(system=system, progress=workflow.progress)
    summary = _summarise(system=system, progress=workflow.progress, wall_s=wall_s,
                         stopped_by=_should_stop(config=system.config, progress=workflow.progress) or "done",
                         cost_usd=workflow.cost_usd(), peak_actors=workflow.decision.num_actors)
    (system.run_dir / "summary.json").write_text(json.dumps(asdict(summary), indent=1))
    return TrainResult(run_dir=system.run_dir, summary=summary, rows=[])
