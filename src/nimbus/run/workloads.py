"""Several independent workloads on one pool of workers (ARTOS 3.3, 6.2): ``nimbus train a.yaml b.yaml``.

One driver, one runtime (the first config's ``runtime`` section is the pool's: backend, capacity,
workers); each workload keeps its own run directory, Store, buffer, metrics, checkpoints, summary and
cost (its policy is named after it, in the pool's one Store). Its functions are named ``<workload>/actor`` and ``<workload>/learner`` (its own warm workers) and
carry ``workload`` into every ledger row; the pool's ledger (``<root>/pool-<stamp>/ledger.jsonl``) has
every row, and each workload's ``ledger.jsonl`` its own, so their costs sum to the pool's. The pool
divides CPUs between workloads by ``runtime.share_weight`` (fair share, runtime/fairshare.py), and a
``devices: {pool: on_demand}`` pool (the first config's) its devices. The local, Ray and simulated backends run it
(simulated: every workload's functions in one virtual-time order, wall_s in simulated seconds). The workloads are
members of one driver loop (run/members.py): the same rounds, stop rules, signals, store-loss handling, final
checkpoint and summary as any run (run/loop.py).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from nimbus.config import NimbusConfig, dump_config
from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import load_pricing
from nimbus.data.shm import claim_run_prefix, release_run_prefix
from nimbus.data.stores import STORE_HEADER, driver_store, store_descriptor, store_worker_env
from nimbus.errors import ConfigError
from nimbus.report.trackers import RunTrackers
from nimbus.run.build import LEDGER_RECORDS_IN_MEMORY, make_run_dir, pool_config, run_namespace
from nimbus.run.members import Members
from nimbus.run.registry import workflow_class, workflow_name
from nimbus.run.rounds import RoundHook, finish
from nimbus.run.summary import TrainResult, write_summary
from nimbus.runtime.base import runtime_clock
from nimbus.runtime.factory import StampedRuntime, make_runtime
from nimbus.types import RoundMetrics, Shared


AfterRound = Callable[[int, RoundMetrics], bool]


def check_workloads(*, configs: list[NimbusConfig]) -> None:
    """Exit-2 rules: unique names; each a one-policy run (any workflow but MARLess's, whose policies are named after
    its agents, not after the workload); one pool (local or Ray) for all."""
    seen: set[str] = set()
    for i, config in enumerate(configs):
        where = f"workload {i + 1} ({config.name})"
        if config.name in seen:
            raise ConfigError(f"name: duplicate workload name {config.name!r} ({where}); give each config its own name")
        seen.add(config.name)
        if config.policies or config.pbt is not None:
            raise ConfigError(f"policies: {where}: a workload on a shared pool trains one policy (a population has a "
                              "pool of its own: run it alone)")
        if workflow_name(config=config) == "multiagent":
            raise ConfigError(f"train.workflow: {where}: a workload on a shared pool trains one policy named after "
                              "it; a multiagent run names its policies after its agents (run it alone)")
        if (config.runtime.backend, config.runtime.address) != (configs[0].runtime.backend, configs[0].runtime.address):
            raise ConfigError(f"runtime.backend: {where}: every workload runs on the first one's pool "
                              f"({configs[0].runtime.backend}, address {configs[0].runtime.address!r})")


def _workload_view(*, config: NimbusConfig, runtime: Any, store: Any, pool_ledger: Ledger, run_dir: Path) -> Shared:
    """One workload's view of the pool: the pool's runtime and Store, its own ledger (the pool's has every row)."""
    (run_dir / "config.yaml").write_text(dump_config(config=config))
    ledger = Ledger(path=run_dir / "ledger.jsonl", keep_in_memory=LEDGER_RECORDS_IN_MEMORY)
    pool_ledger.by_workload[config.name] = ledger
    return Shared(runtime=runtime, ledger=ledger, store=store,
                  pricing=load_pricing(path=Path(config.cost.pricing_path) if config.cost.pricing_path else None))


def _add_workloads(*, members: Members, runtime: Any, store: Any, pool_ledger: Ledger,
                   after_round: AfterRound | None, trackers: ExitStack) -> list[Shared]:
    """Each workload's run directory, view of the pool, workflow (its functions named after it) and experiment
    trackers (``output.loggers``, closed by ``trackers``); the views."""
    views = []
    for i, config in enumerate(members.configs):
        run_dir = make_run_dir(config=config)
        views.append(_workload_view(config=config, runtime=runtime, store=store, pool_ledger=pool_ledger,
                                    run_dir=run_dir))
        workflow = workflow_class(name=workflow_name(config=config)).build(
            config=config, shared=lambda view=views[-1]: view, run_dir=run_dir, policy=config.name,
            resume_from=None, workload=config.name)
        hook = None if after_round is None else lambda row, i=i: _stop_all_if(after_round(i, row), members=members)
        round_hook = RoundHook(config=config, workflow=members.get(i), runtime=runtime, after_round=hook)
        # the workload's own ledger (its bills); added first: closed by the caller if trackers fail
        members.add(workflow=workflow, hook=round_hook, shared=views[-1])
        round_hook.trackers = trackers.enter_context(RunTrackers.open(output=config.output, run_dir=run_dir,
                                                                      config=config.model_dump(mode="json")))
    return views


def _stop_all_if(stop: bool, *, members: Members) -> None:
    if stop:
        for workflow in members.workflows:
            workflow.request_stop()


def train_workloads(*, configs: list[NimbusConfig], after_round: AfterRound | None = None) -> list[TrainResult]:
    """Train every config to its own stop condition over one pool; one TrainResult per workload. ``after_round(i,
    row)`` sees workload i's rows as they come; when it returns True every workload stops (a sweep's pruner). Each
    workload's trackers close on every exit path, after its summary.json and report.png (their artifacts)."""
    check_workloads(configs=configs)
    with ExitStack() as trackers:
        return _train_workloads(configs=configs, after_round=after_round, trackers=trackers)


def _train_workloads(*, configs: list[NimbusConfig], after_round: AfterRound | None,
                     trackers: ExitStack) -> list[TrainResult]:
    shm_prefix = claim_run_prefix()  # the pool's own segment prefix, before any worker starts
    pool_dir = make_run_dir(config=configs[0].model_copy(update={"name": "pool"}))
    pool_ledger = Ledger(path=pool_dir / "ledger.jsonl", keep_in_memory=LEDGER_RECORDS_IN_MEMORY)
    backend = make_runtime(config=pool_config(configs=configs), ledger=pool_ledger,
                           worker_env=store_worker_env(config=configs[0].store))
    backend.set_shares(weights={config.name: config.runtime.share_weight for config in configs})
    members = Members(configs=configs, runtime=backend)
    clock = runtime_clock(runtime=backend)   # simulated seconds on the simulated backend
    started = clock()
    store = None
    try:
        store = driver_store(config=configs[0].store, namespace=run_namespace(run_dir=pool_dir))
        runtime = StampedRuntime(inner=backend, headers={STORE_HEADER: store_descriptor(store)})
        views = _add_workloads(members=members, runtime=runtime, store=store, pool_ledger=pool_ledger,
                               after_round=after_round, trackers=trackers)
        for workflow in members.workflows:
            workflow.publish()
            workflow.prewarm()
        reasons = members.drive_until_stopped(on_failure=lambda i, error: False)
        wall_s = clock() - started
        results = _summaries(configs=configs, members=members, views=views, reasons=reasons,
                             wall_s=wall_s)
    finally:
        for workflow in members.workflows:
            workflow.close()
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
    members.raise_if_store_lost(where=pool_dir.parent)
    return results


def _summaries(*, configs: list[NimbusConfig], members: Members, views: list[Shared], reasons: list[str],
               wall_s: float) -> list[TrainResult]:
    """Each workload's summary (written to its summary.json), with the pool's ``wall_s``."""
    results = []
    for config, workflow, book, view, reason in zip(configs, members.workflows, members.books, views, reasons):
        summary = finish(config=config, workflow=workflow, book=book, shared=view, wall_s=wall_s, stopped_by=reason,
                         peak_actors=workflow.decision.num_actors)
        write_summary(run_dir=workflow.system.run_dir, summary=summary)
        results.append(TrainResult(run_dir=workflow.system.run_dir, summary=summary, rows=[]))
    return results
