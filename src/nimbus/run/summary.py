"""The end of a run: its summary (summary.json) and what ``train()`` returns.

Example::

    summary = summarise(config=config, shared=shared, progress=workflow.progress, wall_s=12.5,
                        stopped_by="max_rounds", cost_usd=book.cost_usd(),
                        cost_excl_cold_usd=book.meter.excl_cold_usd(), peak_actors=4, eval_return=None)
    write_summary(run_dir=run_dir, summary=summary)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nimbus.config import NimbusConfig
from nimbus.cost.ledger import Ledger, LedgerTotals, totals_of
from nimbus.types import RoundMetrics

if TYPE_CHECKING:
    from nimbus.runtime.base import Runtime
    from nimbus.types import Progress, Shared

ROWS_IN_MEMORY = 10_000  # rounds kept in TrainResult.rows (metrics.jsonl has them all)


@dataclass(frozen=True)
class RunSummary:
    """The end-of-run table (also written as summary.json)."""

    final_return: float | None          # mean over the last ``return_window`` training episodes
    eval_return: float | None           # mean over ``eval_episodes`` evaluation episodes of the final policy
    env_steps: int
    episodes: int
    rounds: int
    policy_version: int
    wall_s: float
    invocations: int
    attempts: int
    cold_starts: int
    retries: int
    serverless_cost_usd: float
    serverful_cost_usd: float
    stopped_by: str
    # the serverless cost without cold starts and provisioned idle time (cost/meter.py; the papers' model); None in
    # a summary.json written before it existed
    serverless_cost_excl_cold_usd: float | None = None


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path
    summary: RunSummary
    rows: list[RoundMetrics]    # the newest ROWS_IN_MEMORY rounds of this call; metrics.jsonl has every round


def summarise(*, config: NimbusConfig, shared: Shared, progress: Progress, wall_s: float, stopped_by: str,
              cost_usd: float, cost_excl_cold_usd: float, peak_actors: int, eval_return: float | None) -> RunSummary:
    """The summary of one policy's (or one MARLess run's) progress, over the whole run (a resumed run's sessions
    together); the serverful baseline reserves the peak actors and the learner's GPUs for the whole wall time.
    ``cost_usd`` and ``cost_excl_cold_usd``: the run's two serverless bills (its book's meter, run/book.py)."""
    totals = run_totals(ledger=shared.ledger, resumed=progress.wall_s_before > 0)
    serverful = shared.pricing.serverful_cost_usd(
        wall_s=wall_s, peak_actor_cpus=peak_actors * config.actors.function.cpus,
        peak_learner_gpus=config.learner.function.gpus)
    return RunSummary(
        final_return=float(np.mean(progress.recent_returns)) if progress.recent_returns else None,
        eval_return=eval_return, env_steps=progress.env_steps, episodes=progress.episodes, rounds=progress.rounds,
        policy_version=progress.policy_version, wall_s=wall_s, invocations=totals.invocations,
        attempts=totals.attempts, cold_starts=totals.cold_starts, retries=totals.retries,
        serverless_cost_usd=cost_usd, serverful_cost_usd=serverful, stopped_by=stopped_by,
        serverless_cost_excl_cold_usd=cost_excl_cold_usd)


def run_totals(*, ledger: Ledger, resumed: bool) -> LedgerTotals:
    """The ledger's counts over the whole run, as the summary's rounds, cost and wall time are: a resumed run's
    ledger file also holds the sessions before this one (this session's records alone when it has no file)."""
    if not resumed or ledger.path is None or not Path(ledger.path).is_file():
        return ledger.totals()
    return totals_of(records=Ledger.load(path=ledger.path))


def write_summary(*, run_dir: Path, summary: RunSummary) -> None:
    (Path(run_dir) / "summary.json").write_text(json.dumps(asdict(summary), indent=1))


def read_summary(*, run_dir: Path) -> RunSummary | None:
    """The run's summary.json, or None when it has none (or one that is not a summary)."""
    try:
        data = json.loads((Path(run_dir) / "summary.json").read_text())
        return RunSummary(**{f.name: data[f.name] for f in fields(RunSummary) if f.name in data})
    except (OSError, ValueError, TypeError):
        return None


def runtime_scalars(*, runtime: Runtime) -> dict[str, float]:
    """The pool's counters (warm workers, cold starts...) for a metrics row's ``runtime`` part."""
    stats = runtime.stats()
    return {k: float(v) for k, v in asdict(stats).items() if isinstance(v, (int, float))}
