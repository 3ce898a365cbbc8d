"""What the run loop does after every round and at the end, for every workflow: the same order everywhere.

After a round (``RoundHook``, called by the workflow's book, run/book.py, which has put both bills in the row) →
periodic evaluation (``train.eval_every_env_steps``) → metrics.jsonl → the experiment trackers (``output.loggers``:
the same row, report/trackers.py) → the member controller (a population's ``after_round``) → a checkpoint when one
is due. At the end (``finish``): the final checkpoint, the final evaluation (not after SIGINT/SIGTERM) and the
summary.

Example::

    hook = RoundHook(config=config, workflow=lambda: workflow, rows=rows, runtime=shared.runtime, trackers=trackers)
    members.add(workflow=workflow, hook=hook)         # run/members.py: workflow.on_round = hook
    summary = finish(config=config, workflow=workflow, book=members.books[0], shared=shared, wall_s=60.0,
                     stopped_by="max_rounds", peak_actors=hook.peak_actors)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nimbus.config import NimbusConfig
from nimbus.run.periodic_eval import PeriodicEvaluator
from nimbus.run.stop import SIGNALS
from nimbus.run.summary import RunSummary, runtime_scalars, summarise
from nimbus.runtime.base import between_calls
from nimbus.types import RoundMetrics

if TYPE_CHECKING:
    from nimbus.core import Book, Workflow
    from nimbus.report.trackers import RunTrackers
    from nimbus.runtime.base import Runtime
    from nimbus.types import Shared

FINAL_EVAL_SEED_OFFSET = 10_000   # the final evaluation's seeds: seed + this (periodic ones: + 20_000)


class RoundHook:
    """``on_round`` of one workflow (``workflow``: a callable, since a replaced member gets a new one)."""

    def __init__(self, *, config: NimbusConfig, workflow: Callable[[], Workflow], rows: Any = None,
                 runtime: Runtime | None = None, after_round: Callable[[RoundMetrics], None] | None = None,
                 progress_env_steps: int = 0, trackers: RunTrackers | None = None) -> None:
        self.config, self.workflow, self.rows, self.runtime, self.after_round, self.trackers = \
            config, workflow, rows, runtime, after_round, trackers
        self.peak_actors = 1   # the most actors any round used (the serverful baseline reserves them for the run)
        self.evaluator = PeriodicEvaluator(config=config, env_steps=progress_env_steps, runtime=runtime) \
            if config.train.eval_every_env_steps is not None else None

    def __call__(self, row: RoundMetrics) -> None:
        workflow, config = self.workflow(), self.config
        if self.rows is not None:
            self.rows.append(row)
        self.peak_actors = max(self.peak_actors, row.num_actors)
        if self.evaluator is not None:
            row.extras.update(self.evaluator.maybe_evaluate(evaluate=workflow.evaluate, progress=workflow.progress))
        runtime = runtime_scalars(runtime=self.runtime) if self.runtime else {}
        workflow.metrics.write(row=row, runtime=runtime)
        if self.trackers is not None:   # the same row and runtime counters as metrics.jsonl's
            self.trackers.log(row=row, runtime=runtime)
        if self.after_round is not None:
            self.after_round(row)
        every = config.train.checkpoint_every_rounds
        if row.round % every == every - 1:
            workflow.checkpoint()


def finish(*, config: NimbusConfig, workflow: Workflow, book: Book, shared: Shared, wall_s: float,
           stopped_by: str, peak_actors: int) -> RunSummary:
    """The final checkpoint, the final evaluation unless a signal stopped the run, and the summary."""
    workflow.checkpoint()
    eval_return = None
    if config.train.eval_episodes > 0 and stopped_by not in SIGNALS:
        with between_calls(runtime=shared.runtime):   # inline: no function's call meanwhile (torch's RNG is shared)
            eval_return = workflow.evaluate(episodes=config.train.eval_episodes,
                                            seed=config.seed + FINAL_EVAL_SEED_OFFSET,
                                            explore=config.train.eval_explore).mean_return
    return summarise(config=config, shared=shared, progress=workflow.progress, wall_s=wall_s, stopped_by=stopped_by,
                     cost_usd=book.cost_usd(), cost_excl_cold_usd=book.meter.excl_cold_usd(), peak_actors=peak_actors,
                     eval_return=eval_return)
