"""``train(config)``: every run starts here. A single run is a population of one (``SingleRun``); ``policies:`` or
``pbt:`` make a population (run/population.py); several configs on one pool are workloads (run/workloads.py). All
three go through one skeleton (run/session.py ``run_members``) and one event loop (run/members.py ``drive``):

    1. build   each workflow (``Workflow.build``: its own checks first, then the shared pool: runtime, Store,
               ledger, pricing, run/build.py)
    2. start   version 0 or the checkpoint's versions; pre-warm
    3. run     events → ``handle`` → ``poll`` under SIGINT/SIGTERM → ``request_stop`` (signals.py) and a lost store
               (P12); each round's facts go to the workflow's book (book.py), then the round hook (rounds.py):
               periodic eval → metrics → member controller → checkpoint when due
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
from typing import Any

from nimbus.config import NimbusConfig
from nimbus.errors import CheckpointError, FunctionFailed, StoreUnavailable
from nimbus.run.build import build_shared, make_run_dir
from nimbus.run.members import UNGATED, Gate, Members
from nimbus.run.population import train_population
from nimbus.run.ray_slots import keep_slots_on_ray
from nimbus.run.rounds import RoundHook
from nimbus.run.rundir import claim_run_dir
from nimbus.run.session import Member, SharedOnce, run_members
from nimbus.run.stop import say_nothing_to_train, stop_reason
from nimbus.run.summary import ROWS_IN_MEMORY, RunSummary, TrainResult, read_summary, write_summary
from nimbus.types import Progress, RoundMetrics, Shared

POLICY = "main"   # the policy of a one-policy run (a population names each member)
__all__ = ["train", "RunSummary", "TrainResult", "SingleRun"]


def train(*, config: NimbusConfig, run_dir: Path | None = None, resume_from: Path | None = None) -> TrainResult:
    """Train per ``config``; with ``resume_from`` (a run directory or checkpoint), continue from its newest
    checkpoint instead of version 0 (data/resume.py says what comes back). The run directory is this process's
    alone while it runs, and a new run never reuses one that holds files (run/rundir.py)."""
    if resume_from is not None and not Path(resume_from).exists():
        raise CheckpointError(f"cannot resume from {resume_from}: no such directory")
    in_place = resume_from is not None and _is_run_directory(path=Path(resume_from)) and \
        (run_dir is None or Path(run_dir).resolve() == Path(resume_from).resolve())
    if in_place and resume_from is not None:
        run_dir = Path(resume_from)
    else:
        run_dir = Path(run_dir) if run_dir is not None else make_run_dir(config=config)
    with claim_run_dir(run_dir=run_dir, resuming=in_place):
        if config.policies or config.pbt is not None:  # several policies over one pool: a population
            return train_population(config=config, run_dir=run_dir, resume_from=resume_from)
        return run_members(shape=SingleRun(config=config, run_dir=run_dir, resume_from=resume_from))[0]


def _is_run_directory(*, path: Path) -> bool:
    """A run's own directory (resumed in place), not one of its ``checkpoints/`` or ``ckpt-*`` directories."""
    return (path / "checkpoints").is_dir() or (path / "policies").is_dir()


def finished_summary(*, config: NimbusConfig, progress: Progress, run_dir: Path) -> RunSummary | None:
    """A resumed run whose checkpoint already meets a stop rule trains nothing: it says so and returns the summary
    it ended with (None: train on, also when that summary is missing)."""
    reason = stop_reason(config=config, progress=progress) if progress.rounds > 0 else None
    summary = read_summary(run_dir=run_dir)
    if reason is None or summary is None:
        return None
    say_nothing_to_train(run_dir=run_dir, reason=reason, progress=progress)
    return summary


class SingleRun:
    """One workflow in the claimed ``run_dir`` (run/session.py's skeleton): a population of one. Its pool is made
    when the workflow asks for it; its rows come back in the TrainResult; summary.json and report.png are written
    before its trackers close (their artifacts)."""

    gate: Gate = UNGATED

    def __init__(self, *, config: NimbusConfig, run_dir: Path, resume_from: Path | None) -> None:
        config = keep_slots_on_ray(config=config)   # a Ray actor's envs go on in its next worker (run/ray_slots.py)
        self.config, self.run_dir = config, run_dir
        self.members = [Member(config=config, run_dir=run_dir, policy=POLICY, resume_from=resume_from)]
        self.pool = SharedOnce(make=lambda prefix: build_shared(config=config, run_dir=run_dir, shm_prefix=prefix))
        self.kept: deque[RoundMetrics] = deque(maxlen=ROWS_IN_MEMORY)  # bounded: a long run's driver stays flat (P13)

    def view(self, i: int) -> Shared:
        return self.pool()

    def after_round(self, i: int, members: Members) -> None:
        return None

    def rows(self, i: int) -> deque[RoundMetrics]:
        return self.kept

    def finished(self, members: Members) -> list[TrainResult] | None:
        summary = finished_summary(config=self.config, progress=members.workflows[0].progress, run_dir=self.run_dir)
        return None if summary is None else [TrainResult(run_dir=self.run_dir, summary=summary, rows=[])]

    def start(self, members: Members) -> None:
        members.workflows[0].start()   # publish, pre-warm, pre-register

    def on_failure(self, i: int, error: FunctionFailed) -> bool:
        return False

    def on_replaced(self, i: int, workflow: Any) -> None:
        pass

    def peak_actors(self, i: int, *, workflow: Any, hook: RoundHook, members: Members) -> int:
        return hook.peak_actors

    def close(self) -> None:
        self.pool.close()

    def conclude(self, *, summaries: list[RunSummary], members: Members, wall_s: float) -> list[TrainResult]:
        write_summary(run_dir=self.run_dir, summary=summaries[0])
        if self.config.output.report:
            from nimbus.report.render import render_report
            render_report(run_dir=self.run_dir)
        if members.lost_store is not None:
            raise StoreUnavailable(f"{members.lost_store}; stopped cleanly after round "
                                   f"{members.workflows[0].progress.rounds} with a final checkpoint in "
                                   f"{self.run_dir / 'checkpoints'}")
        return [TrainResult(run_dir=self.run_dir, summary=summaries[0], rows=list(self.kept))]
