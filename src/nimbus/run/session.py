"""One start-up skeleton for every run: a single run (run/loop.py), a population (run/members.py) and several
workloads on one pool (run/workloads.py) are built, started, driven, finished and closed by ``run_members``.

    build    each member's workflow (its own checks first: exit 2 before the pool exists), then the driver
             loop over the pool's event queue; a resumed member's metrics rows after its checkpoint are cut
    track    each member's round hook (run/rounds.py), book (run/book.py) and experiment trackers
    start    unless every member already meets its stop rule (a finished resume): the shape's start
    drive    ``Members.drive_until_stopped``: the one event loop, signals and a lost store included
    finish   each member's final checkpoint, final evaluation and summary (run/rounds.py ``finish``)
    close    every workflow, then the shape's pool; what the shape writes last (summary.json, report)

A ``RunShape`` is what sets one kind of run apart around this skeleton: its members, its pool, what it does
after each round, how it starts, who may replace a failed member, and what it returns. Every exit path closes the
workflows and the pool, and the trackers after what the shape writes last (their artifacts).

Example (run/loop.py)::

    result = run_members(shape=SingleRun(config=config, run_dir=run_dir, resume_from=None))[0]
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nimbus.config import NimbusConfig
from nimbus.data.jsonl import cut_rows_from
from nimbus.data.shm import claim_run_prefix, release_run_prefix
from nimbus.errors import FunctionFailed
from nimbus.report.trackers import RunTrackers
from nimbus.run.members import Gate, Members
from nimbus.run.registry import workflow_class, workflow_name
from nimbus.run.rounds import RoundHook, finish
from nimbus.run.summary import RunSummary, TrainResult
from nimbus.types import RoundMetrics, Shared


@dataclass(frozen=True)
class Member:
    """One workflow the skeleton builds: what it trains and where it writes."""

    config: NimbusConfig
    run_dir: Path
    policy: str                         # its Store keys: weights/<policy>/<version>
    resume_from: Path | None = None     # its own checkpoint (a run or member directory)
    rank_base: int = 0                  # a population's members' actor ranks are disjoint
    workload: str | None = None         # several workloads on one pool: its functions are named after it
    artifacts_from: Path | None = None  # its trackers' artifacts, when not its own run directory (a population's)


class SharedOnce:
    """A run's shared pool, made when a workflow first asks for it (after its own checks: exit 2 before any
    worker), closed by the skeleton; the run's shared-memory prefix is released either way."""

    def __init__(self, *, make: Callable[[str], Shared]) -> None:
        self.prefix = claim_run_prefix()   # this run's own, before any segment or worker exists (workers inherit it)
        self.make = make
        self.shared: Shared | None = None

    def __call__(self) -> Shared:
        if self.shared is None:
            self.shared = self.make(self.prefix)
        return self.shared

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()
        else:
            release_run_prefix(prefix=self.prefix)


class RunShape(Protocol):
    """What sets one kind of run apart (module docstring): SingleRun, PopulationRun, WorkloadsRun."""

    members: list[Member]
    gate: Gate

    def view(self, i: int) -> Shared:
        """Member ``i``'s view of the pool (its ledger, the pool's runtime and Store); the pool is made on the
        first call."""
        ...

    def after_round(self, i: int, members: Members) -> Callable[[RoundMetrics], None] | None:
        """What follows each of member ``i``'s rounds besides the round hook's own work (None: nothing)."""
        ...

    def rows(self, i: int) -> Any:
        """Where member ``i``'s rows are kept for the result (a bounded deque), or None."""
        ...

    def finished(self, members: Members) -> list[TrainResult] | None:
        """A resume whose members already meet their stop rules trains nothing: the results it ended with."""
        ...

    def start(self, members: Members) -> None:
        """Version 0 or the checkpoints' versions, pre-warmed workers: everything before the first round."""
        ...

    def on_failure(self, i: int, error: FunctionFailed) -> bool:
        """True when member ``i`` was re-seeded after ``error`` (a population's); False: the error stops the run."""
        ...

    def on_replaced(self, i: int, workflow: Any) -> None:
        ...

    def peak_actors(self, i: int, *, workflow: Any, hook: RoundHook, members: Members) -> int:
        """The actors the serverful baseline reserves for member ``i`` for the whole run."""
        ...

    def close(self) -> None:
        """The pool (and a controller's files); after every workflow closed."""
        ...

    def conclude(self, *, summaries: list[RunSummary], members: Members, wall_s: float) -> list[TrainResult]:
        """What the shape writes last (summary.json, its own files, the report) and returns; raises
        StoreUnavailable when the store was lost (after the final checkpoints)."""
        ...


def run_members(*, shape: RunShape) -> list[TrainResult]:
    """Build, start, drive, finish and close the shape's members (module docstring)."""
    with ExitStack() as trackers:   # closed last: after the files the shape writes (their artifacts)
        return _run(shape=shape, trackers=trackers)


def _run(*, shape: RunShape, trackers: ExitStack) -> list[TrainResult]:
    built: list[Any] = []
    members: Members | None = None
    try:
        for i, member in enumerate(shape.members):
            workflow: Any = workflow_class(name=workflow_name(config=member.config))
            built.append(workflow.build(
                config=member.config, shared=lambda i=i: shape.view(i), run_dir=member.run_dir, policy=member.policy,
                resume_from=member.resume_from, rank_base=member.rank_base, workload=member.workload))
        runtime = shape.view(0).runtime
        members = Members(configs=[member.config for member in shape.members], runtime=runtime)
        started = members.clock()   # simulated seconds on the simulated backend
        hooks = []
        for i, (member, workflow) in enumerate(zip(shape.members, built)):
            if workflow.progress.rounds > 0:   # resumed: the rounds after its checkpoint run again, written once
                cut_rows_from(path=member.run_dir / "metrics.jsonl", key="round", first=workflow.progress.rounds)
            hook = RoundHook(config=member.config, workflow=members.get(i), rows=shape.rows(i), runtime=runtime,
                             after_round=shape.after_round(i, members),
                             progress_env_steps=workflow.progress.env_steps)   # resumed: its next evaluation mark
            members.add(workflow=workflow, hook=hook, shared=shape.view(i))
            hooks.append(hook)
            hook.trackers = trackers.enter_context(RunTrackers.open(
                output=member.config.output, run_dir=member.run_dir, config=member.config.model_dump(mode="json"),
                artifacts_from=member.artifacts_from))
        finished = shape.finished(members)
        if finished is not None:   # before start: a finished run pre-warms and publishes nothing either
            return finished
        shape.start(members)
        reasons = members.drive_until_stopped(on_failure=shape.on_failure, on_replaced=shape.on_replaced,
                                              gate=shape.gate)
        wall_s = members.clock() - started
        summaries = [finish(config=member.config, workflow=workflow, book=book, shared=shape.view(i),
                            stopped_by=reason, wall_s=wall_s + workflow.progress.wall_s_before,
                            peak_actors=shape.peak_actors(i, workflow=workflow, hook=hook, members=members))
                     for i, (member, workflow, book, hook, reason) in enumerate(
                         zip(shape.members, members.workflows, members.books, hooks, reasons))]
    finally:
        for workflow in (members.workflows if members is not None else built):
            workflow.close()
        shape.close()
    return shape.conclude(summaries=summaries, members=members, wall_s=wall_s)

