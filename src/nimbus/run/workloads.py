"""Several independent workloads on one pool of workers (ARTOS 3.3, 6.2): ``nimbus train a.yaml b.yaml``.

One driver, one runtime (the first config's ``runtime`` section is the pool's: backend, capacity, workers); each
workload keeps its own run directory, Store, buffer, metrics, checkpoints, summary and cost (its policy is named
after it, in the pool's one Store). Its functions are named ``<workload>/actor`` and ``<workload>/learner`` (its own
warm workers) and carry ``workload`` into every ledger row; the pool's ledger (``<root>/pool-<stamp>/ledger.jsonl``)
has every row, and each workload's ``ledger.jsonl`` its own, so their costs sum to the pool's. The pool divides CPUs
between workloads by ``runtime.share_weight`` (fair share, runtime/fairshare.py), and a ``devices: {pool:
on_demand}`` pool (the first config's) its devices. The local, Ray and simulated backends run it (simulated: every
workload's functions in one virtual-time order, wall_s in simulated seconds). The workloads are members of one
driver loop (run/members.py): the same rounds, stop rules, signals, store-loss handling, final checkpoint and
summary as any run (run/loop.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nimbus.config import NimbusConfig, dump_config
from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import load_pricing
from nimbus.data.shm import claim_run_prefix, release_run_prefix
from nimbus.data.stores import STORE_HEADER, driver_store, store_descriptor, store_worker_env
from nimbus.errors import ConfigError, FunctionFailed
from nimbus.run.build import LEDGER_RECORDS_IN_MEMORY, make_run_dir, pool_config, run_namespace
from nimbus.run.members import UNGATED, Gate, Members
from nimbus.run.registry import workflow_name
from nimbus.run.rounds import RoundHook
from nimbus.run.session import Member, run_members
from nimbus.run.summary import RunSummary, TrainResult, write_summary
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
        if workflow_name(config=config) == "marless":
            raise ConfigError(f"train.workflow: {where}: a workload on a shared pool trains one policy named after "
                              "it; a marless run names its policies after its agents (run it alone)")
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


def _stop_all_if(stop: bool, *, members: Members) -> None:
    if stop:
        for workflow in members.workflows:
            workflow.request_stop()


def train_workloads(*, configs: list[NimbusConfig], after_round: AfterRound | None = None) -> list[TrainResult]:
    """Train every config to its own stop condition over one pool; one TrainResult per workload. ``after_round(i,
    row)`` sees workload i's rows as they come; when it returns True every workload stops (a sweep's pruner). Each
    workload's trackers close on every exit path, after its summary.json and report.png (their artifacts)."""
    check_workloads(configs=configs)
    return run_members(shape=WorkloadsRun(configs=configs, after_round=after_round))


class WorkloadsRun:
    """Several workloads in run/session.py's skeleton: one pool (the first config's runtime section, CPUs shared by
    ``runtime.share_weight``), one Store, the pool's ledger with every row and each workload's view with its own."""

    gate: Gate = UNGATED

    def __init__(self, *, configs: list[NimbusConfig], after_round: AfterRound | None) -> None:
        self.configs, self.after = configs, after_round
        self.pool_dir = make_run_dir(config=configs[0].model_copy(update={"name": "pool"}))
        self.members = [Member(config=config, run_dir=make_run_dir(config=config), policy=config.name,
                               workload=config.name) for config in configs]
        self.shm_prefix = claim_run_prefix()  # the pool's own segment prefix, before any worker starts
        self.pool_ledger = Ledger(path=self.pool_dir / "ledger.jsonl", keep_in_memory=LEDGER_RECORDS_IN_MEMORY)
        self.backend: Any = None
        self.store: Any = None
        self.views: dict[int, Shared] = {}

    def view(self, i: int) -> Shared:
        """Workload ``i``'s view of the pool (its own ledger); the pool's runtime and Store are made on the first
        call (after the first workload's own checks)."""
        if self.backend is None:
            configs = self.configs
            self.backend = make_runtime(config=pool_config(configs=configs), ledger=self.pool_ledger,
                                        worker_env=store_worker_env(config=configs[0].store))
            self.backend.set_shares(weights={config.name: config.runtime.share_weight for config in configs})
            self.store = driver_store(config=configs[0].store, namespace=run_namespace(run_dir=self.pool_dir))
            self.runtime = StampedRuntime(inner=self.backend, headers={STORE_HEADER: store_descriptor(self.store)})
        if i not in self.views:
            member = self.members[i]
            self.views[i] = _workload_view(config=member.config, runtime=self.runtime, store=self.store,
                                           pool_ledger=self.pool_ledger, run_dir=member.run_dir)
        return self.views[i]

    def after_round(self, i: int, members: Members) -> Any:
        after = self.after
        return None if after is None else lambda row: _stop_all_if(after(i, row), members=members)

    def rows(self, i: int) -> None:
        return None

    def finished(self, members: Members) -> None:
        return None   # a workload never resumes

    def start(self, members: Members) -> None:
        for workflow in members.workflows:
            workflow.publish()
            workflow.prewarm()

    def on_failure(self, i: int, error: FunctionFailed) -> bool:
        return False

    def on_replaced(self, i: int, workflow: Any) -> None:
        pass

    def peak_actors(self, i: int, *, workflow: Any, hook: RoundHook, members: Members) -> int:
        return workflow.decision.num_actors

    def close(self) -> None:
        if self.backend is not None:
            self.backend.shutdown()
        if self.store is not None:
            self.store.close()
        self.pool_ledger.close()
        release_run_prefix(prefix=self.shm_prefix)

    def conclude(self, *, summaries: list[RunSummary], members: Members, wall_s: float) -> list[TrainResult]:
        """Each workload's summary.json, the pool's workloads.json (with the pool's ``wall_s``), each report."""
        results = []
        for member, summary in zip(self.members, summaries):
            write_summary(run_dir=member.run_dir, summary=summary)
            results.append(TrainResult(run_dir=member.run_dir, summary=summary, rows=[]))
        (self.pool_dir / "workloads.json").write_text(json.dumps(
            {"workloads": {member.config.name: str(member.run_dir) for member in self.members}, "wall_s": wall_s},
            indent=1))
        for member in self.members:
            if member.config.output.report:
                from nimbus.report.render import render_report
                render_report(run_dir=member.run_dir)
        members.raise_if_store_lost(where=self.pool_dir.parent)
        return results
