"""A population's run (``policies:`` or ``pbt:``): its members on one pool, in run/session.py's skeleton; the
controller (pbt/population.py ``Population``, found by name in run/registry.py) plans the members, gates them
between rounds (synchronous PBT), replaces a failed one, and writes population.json and the best member's summary.

Example::

    result = train_population(config=config, run_dir=run_dir, resume_from=None)   # the best member's summary
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nimbus.config import NimbusConfig
from nimbus.errors import FunctionFailed
from nimbus.run.build import build_shared, pool_config
from nimbus.run.members import Members
from nimbus.run.registry import controller_class
from nimbus.run.rounds import RoundHook
from nimbus.run.session import Member, SharedOnce, run_members
from nimbus.run.stop import say_nothing_to_train
from nimbus.run.summary import RunSummary, TrainResult, read_summary
from nimbus.types import Shared


def train_population(*, config: NimbusConfig, run_dir: Path, resume_from: Path | None) -> TrainResult:
    """Train every policy of ``config`` over one pool; the summary is the best member's (population.json has all).
    With ``resume_from`` (the run directory) every member continues from its own newest checkpoint. Each member has
    its own experiment trackers (``output.loggers`` in ``policies/<name>/``), closed on every exit path after the
    population's summary.json, population.json and report.png (their artifacts)."""
    return run_members(shape=PopulationRun(config=config, run_dir=run_dir, resume_from=resume_from))[0]


class PopulationRun:
    """The members the controller plans, on one pool with room for every member's actors and learner at once."""

    def __init__(self, *, config: NimbusConfig, run_dir: Path, resume_from: Path | None) -> None:
        self.run_dir = run_dir
        self.population = controller_class(name="population")(config=config, run_dir=run_dir, resume_from=resume_from)
        self.gate = self.population
        plans = self.population.plans
        self.members = [Member(config=plan.config, run_dir=plan.run_dir, policy=plan.name,
                               resume_from=plan.resume_from, rank_base=plan.rank_base, artifacts_from=run_dir)
                        for plan in plans]
        pool = pool_config(configs=[plan.config for plan in plans])
        self.pool = SharedOnce(make=lambda prefix: build_shared(config=config, run_dir=run_dir, shm_prefix=prefix,
                                                                pool=pool))

    def view(self, i: int) -> Shared:
        return self.pool()

    def after_round(self, i: int, members: Members) -> Any:
        return lambda row: self.population.after_round(i, row)

    def rows(self, i: int) -> None:
        return None

    def finished(self, members: Members) -> list[TrainResult] | None:
        """Every member already meets its stop rule (a resume): it says so (with the limit to raise) and keeps the
        summary it ended with (None: train on, also when that summary is missing)."""
        reasons = [reason for i in range(len(members.workflows)) if (reason := members.stopped(i)) is not None]
        summary = read_summary(run_dir=self.run_dir)
        if len(reasons) < len(members.workflows) or summary is None:
            return None
        say_nothing_to_train(run_dir=self.run_dir, reason=reasons[0], progress=members.workflows[0].progress)
        return [TrainResult(run_dir=self.run_dir, summary=summary, rows=[])]

    def start(self, members: Members) -> None:
        self.population.begin(workflows=list(members.workflows))
        for i, workflow in enumerate(members.workflows):
            self.population.attach(i, workflow)
            workflow.publish()
        self.population.prewarm(shared=self.pool())

    def on_failure(self, i: int, error: FunctionFailed) -> bool:
        return self.population.on_failure(i, error)

    def on_replaced(self, i: int, workflow: Any) -> None:
        self.population.attach(i, workflow)

    def peak_actors(self, i: int, *, workflow: Any, hook: RoundHook, members: Members) -> int:
        return workflow.decision.num_actors * len(members.workflows)

    def close(self) -> None:
        self.population.close()
        self.pool.close()

    def conclude(self, *, summaries: list[RunSummary], members: Members, wall_s: float) -> list[TrainResult]:
        by_name = {member.policy: summary for member, summary in zip(self.members, summaries)}
        best = self.population.finish(summaries=by_name)
        self.population.report()
        members.raise_if_store_lost(where=self.run_dir / "policies")
        return [TrainResult(run_dir=self.run_dir, summary=by_name[best], rows=[])]
