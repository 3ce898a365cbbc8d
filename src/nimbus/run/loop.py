"""``train(config)``: the one run loop. Every workflow goes through it (registry.py finds the class by name):

    1. build   the workflow (``Workflow.build``: its own checks first, then the shared pool: runtime, Store,
               ledger, pricing, run/build.py), or a population's members (run/members.py)
    2. start   version 0 or the checkpoint's versions; pre-warm
    3. run     rounds under SIGINT/SIGTERM → ``request_stop`` (signals.py) and ``run_unless_store_lost`` (P12);
               after every round (rounds.py): periodic eval → metrics → member controller → checkpoint when due
    4. stop    the reason (stop.py), the final checkpoint, the final evaluation (not after a signal), the
               summary (summary.py), summary.json and the report
    5. track   the experiment trackers (``output.loggers``, report/trackers.py) get every round's row after
               metrics.jsonl; they close on every exit path, after summary.json and report.png (their artifacts)

Example::

    result = train(config=load_config(path=Path("configs/ppo-cartpole.yaml")))
    result.run_dir, result.summary.final_return
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from nimbus.config import NimbusConfig
from nimbus.data.jsonl import cut_rows_from
from nimbus.data.shm import claim_run_prefix, release_run_prefix
from nimbus.errors import CheckpointError, StoreUnavailable
from nimbus.report.trackers import RunTrackers
from nimbus.run.build import build_shared, make_run_dir
from nimbus.run.members import Members, train_population
from nimbus.run.ray_slots import keep_slots_on_ray
from nimbus.run.registry import workflow_class, workflow_name
from nimbus.run.rounds import RoundHook, finish
from nimbus.run.rundir import claim_run_dir
from nimbus.run.stop import say_nothing_to_train, stop_reason
from nimbus.run.summary import ROWS_IN_MEMORY, RunSummary, TrainResult, read_summary, write_summary
from nimbus.runtime.base import runtime_clock
from nimbus.types import Progress, RoundMetrics, Shared

if TYPE_CHECKING:
    from nimbus.core import Workflow

POLICY = "main"   # the policy of a one-policy run (a population names each member)
__all__ = ["train", "RunSummary", "TrainResult", "SharedOnce"]


class SharedOnce:
    """The run's shared pool, made when the workflow asks for it (after its own checks: exit 2 before any
    worker), closed by the loop; the run's shared-memory prefix is released either way."""

    def __init__(self, *, make: Callable[[str], Shared]) -> None:
        self.prefix = claim_run_prefix()   # this run's own, before any segment or worker exists (workers inherit it)
        self.make, self.shared = make, None

    def __call__(self) -> Shared:
        if self.shared is None:
            self.shared = self.make(self.prefix)
        return self.shared

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()
        else:
            release_run_prefix(prefix=self.prefix)


def train(*, config: NimbusConfig, run_dir: Path | None = None, resume_from: Path | None = None) -> TrainResult:
    """Train per ``config``; with ``resume_from`` (a run directory or checkpoint), continue from its newest
    checkpoint instead of version 0 (data/resume.py says what comes back). The run directory is this process's
    alone while it runs, and a new run never reuses one that holds files (run/rundir.py)."""
    if resume_from is not None and not Path(resume_from).exists():
        raise CheckpointError(f"cannot resume from {resume_from}: no such directory")
    in_place = resume_from is not None and _is_run_directory(path=Path(resume_from)) and \
        (run_dir is None or Path(run_dir).resolve() == Path(resume_from).resolve())
    run_dir = Path(resume_from) if in_place else Path(run_dir) if run_dir is not None else make_run_dir(config=config)
    with claim_run_dir(run_dir=run_dir, resuming=in_place):
        if config.policies or config.pbt is not None:  # several policies over one pool: a population
            return train_population(config=config, run_dir=run_dir, resume_from=resume_from)
        return _train_one(config=config, run_dir=run_dir, resume_from=resume_from)


def _is_run_directory(*, path: Path) -> bool:
    """A run's own directory (resumed in place), not one of its ``checkpoints/`` or ``ckpt-*`` directories."""
    return (path / "checkpoints").is_dir() or (path / "policies").is_dir()


def _train_one(*, config: NimbusConfig, run_dir: Path, resume_from: Path | None) -> TrainResult:
    """One workflow's run in the claimed ``run_dir``; its experiment trackers (``output.loggers``) open once the
    workflow is built and close on every exit path, after summary.json and report.png (uploaded as artifacts)."""
    name = workflow_name(config=config)
    config = keep_slots_on_ray(config=config)   # a Ray actor's envs go on in its next worker (run/ray_slots.py)
    pool = SharedOnce(make=lambda prefix: build_shared(config=config, run_dir=run_dir, shm_prefix=prefix))
    workflow = None
    try:
        workflow = workflow_class(name=name).build(config=config, shared=pool, run_dir=run_dir, policy=POLICY,
                                                   resume_from=resume_from)
        trackers = RunTrackers.open(output=config.output, run_dir=run_dir, config=config.model_dump(mode="json"))
    except BaseException:
        if workflow is not None:
            workflow.close()
        pool.close()
        raise
    with trackers:   # left with an exception (store lost, a crash, a second Ctrl-C): the tracker run is failed
        return _run_one(config=config, run_dir=run_dir, workflow=workflow, pool=pool, trackers=trackers)


def resumed_start(*, config: NimbusConfig, progress: Progress, run_dir: Path) -> RunSummary | None:
    """A resumed run (its checkpoint's rounds > 0): the metrics rows its killed session wrote after that checkpoint
    are cut (those rounds run again, and a curve must not step back); when the checkpoint already meets a stop rule
    the run trains nothing: it says so and returns the summary it ended with (None: train on)."""
    if progress.rounds == 0:
        return None
    cut_rows_from(path=run_dir / "metrics.jsonl", key="round", first=progress.rounds)
    reason = stop_reason(config=config, progress=progress)
    summary = read_summary(run_dir=run_dir)
    if reason is None or summary is None:
        return None
    say_nothing_to_train(run_dir=run_dir, reason=reason, progress=progress)
    return summary


def _run_one(*, config: NimbusConfig, run_dir: Path, workflow: Workflow, pool: SharedOnce,
             trackers: RunTrackers) -> TrainResult:
    """Start, rounds, stop: the summary and the report; the workflow and the pool are closed here."""
    rows: deque[RoundMetrics] = deque(maxlen=ROWS_IN_MEMORY)  # bounded: a long run's driver stays flat (P13)
    lost_store = None
    clock = runtime_clock(runtime=pool().runtime)   # simulated seconds on runtime.backend: simulated
    started = clock()
    try:
        finished = resumed_start(config=config, progress=workflow.progress, run_dir=run_dir)
        if finished is not None:   # before start(): a finished run pre-warms nothing either
            return TrainResult(run_dir=run_dir, summary=finished, rows=[])
        hook = RoundHook(config=config, workflow=lambda: workflow, rows=rows, runtime=pool().runtime,
                         progress_env_steps=workflow.progress.env_steps, trackers=trackers)
        members = Members(configs=[config], runtime=pool().runtime)   # a single run: a population of one
        members.add(workflow=workflow, hook=hook, shared=pool())
        workflow.start()
        stopped_by = members.drive_until_stopped(on_failure=lambda i, error: False)[0]
        lost_store = members.lost_store
        summary = finish(config=config, workflow=workflow, book=members.books[0], shared=pool(), stopped_by=stopped_by,
                         wall_s=clock() - started + workflow.progress.wall_s_before,
                         peak_actors=hook.peak_actors)
    finally:
        workflow.close()
        pool.close()
    write_summary(run_dir=run_dir, summary=summary)
    if config.output.report:
        from nimbus.report.render import render_report
        render_report(run_dir=run_dir)
    if lost_store is not None:
        raise StoreUnavailable(f"{lost_store}; stopped cleanly after round {workflow.progress.rounds} with a final "
                               f"checkpoint in {run_dir / 'checkpoints'}")
    return TrainResult(run_dir=run_dir, summary=summary, rows=list(rows))
