"""The simulated planner (``nimbus plan --simulate``): time, cost and return at a target scale, over seeds.

Each seed is a whole training run of the config on the simulated backend (``runtime.backend: simulated``,
docs/simulated.md): its durations come from ``simulation:`` (a profile fitted from real runs, a hardware file),
its learning is real. So the return at 1,000 actors is learned, not extrapolated, and stragglers, queueing, cold
starts and staleness act on it as they would on the simulated cluster. Per seed: the simulated wall time, the
median round time, the serverless and serverful bills and the final return; over the seeds: the interquartile
mean of each with its 95 % stratified-bootstrap interval (analysis/stats.py ``aggregate``).

Every seed's config is loaded (and refused, exit 2 naming the key) before the first run starts. ``run_seeds`` says
when each seed starts and ends (a plan at scale runs for minutes). SIGINT or SIGTERM stops the plan as a whole: the
seed it was in is not counted (its truncated figures would bias the IQM), the seeds done before are.

Example::

    configs = plan_configs(config_path=Path("configs/stellaris-cartpole.yaml"), seeds=[0, 1, 2],
                           overrides=["actors.scaling.num_actors=1000", "stellaris.learners=16"])
    plan = aggregate_seeds(seeds=[run_seed(config=c, run_dir=tmp / f"seed-{c.seed}") for c in configs])
    plan.final_return.point, plan.final_return.low, plan.final_return.high
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nimbus.analysis.stats import Interval, aggregate
from nimbus.config import NimbusConfig, load_config
from nimbus.run.stop import SIGNALS
from nimbus.run.summary import RunSummary

# Before the user's --set (theirs win): a plan's runs are quiet. After them: the backend and the seed.
QUIET = ("output.report=false", "output.loggers=[]", "output.status_line=false")


@dataclass(frozen=True)
class SeedPlan:
    """One seed's simulated run: simulated seconds, dollars (cost/pricing.yaml) and its final return."""

    seed: int
    run_dir: str
    rounds: int
    env_steps: int
    wall_s: float
    round_s_median: float
    serverless_usd: float
    serverful_usd: float
    final_return: float | None


@dataclass(frozen=True)
class SimulatedPlan:
    """Per-seed rows and, over them, each figure's IQM with its 95 % bootstrap interval (None: no seed has one)."""

    seeds: tuple[SeedPlan, ...]
    wall_s: Interval
    round_s: Interval
    serverless_usd: Interval
    serverful_usd: Interval
    final_return: Interval | None


def plan_configs(*, config_path: Path, overrides: list[str], seeds: list[int]) -> list[NimbusConfig]:
    """The config of each seed on the simulated backend; ConfigError (exit 2, the key path) on the first refusal."""
    return [load_config(path=config_path, overrides=[*QUIET, *overrides, "runtime.backend=simulated",
                                                     f"seed={seed}"]) for seed in seeds]


@dataclass(frozen=True)
class SeedRuns:
    """The seeds that ran to their end, and the one a signal stopped (not counted), if any."""

    done: tuple[SeedPlan, ...]
    interrupted_seed: int | None = None
    interrupted_by: str | None = None


def run_seeds(*, configs: list[NimbusConfig], root: Path, say: Callable[[str], None]) -> SeedRuns:
    """Each config's simulated run into ``root/seed-<n>``, in order, until a signal stops one; ``say`` hears when
    each starts and ends."""
    from nimbus.run.loop import train

    done: list[SeedPlan] = []
    for k, config in enumerate(configs, start=1):
        say(f"seed {config.seed} ({k} of {len(configs)}): simulating up to {config.train.total_env_steps:,} env steps")
        try:
            result = train(config=config, run_dir=root / f"seed-{config.seed}")
        except KeyboardInterrupt:   # Ctrl-C before the run's own handler was in place (while it was being built)
            return SeedRuns(done=tuple(done), interrupted_seed=config.seed, interrupted_by="SIGINT")
        if result.summary.stopped_by in SIGNALS:
            return SeedRuns(done=tuple(done), interrupted_seed=config.seed, interrupted_by=result.summary.stopped_by)
        done.append(seed_plan(seed=config.seed, run_dir=result.run_dir, summary=result.summary,
                              rounds_s=[row.round_s for row in result.rows]))
        say(f"seed {config.seed} done: {result.summary.rounds} rounds, {result.summary.wall_s:,.1f} s simulated time")
    return SeedRuns(done=tuple(done))


def run_seed(*, config: NimbusConfig, run_dir: Path) -> SeedPlan:
    """Train ``config`` (simulated) into ``run_dir`` and keep its figures."""
    from nimbus.run.loop import train

    result = train(config=config, run_dir=run_dir)
    return seed_plan(seed=config.seed, run_dir=run_dir, summary=result.summary,
                     rounds_s=[row.round_s for row in result.rows])


def seed_plan(*, seed: int, run_dir: Path, summary: RunSummary, rounds_s: list[float]) -> SeedPlan:
    """One seed's figures from its run's summary and round times."""
    rounds_s = rounds_s or [summary.wall_s]
    return SeedPlan(seed=seed, run_dir=str(run_dir), rounds=summary.rounds, env_steps=summary.env_steps,
                    wall_s=summary.wall_s, round_s_median=float(statistics.median(rounds_s)),
                    serverless_usd=summary.serverless_cost_usd, serverful_usd=summary.serverful_cost_usd,
                    final_return=summary.final_return)


def aggregate_seeds(*, seeds: list[SeedPlan]) -> SimulatedPlan:
    """IQM and 95 % bootstrap interval of each figure over ``seeds`` (a seed without a finished episode has no
    return and is left out of that one)."""
    if not seeds:
        raise ValueError("aggregate_seeds: no seed to aggregate")

    def over(values: list[float]) -> Interval:
        return aggregate(scores_by_task=[np.asarray(values, dtype=np.float64)], statistic="iqm")

    returns = [s.final_return for s in seeds if s.final_return is not None and math.isfinite(s.final_return)]
    return SimulatedPlan(seeds=tuple(seeds), wall_s=over([s.wall_s for s in seeds]),
                         round_s=over([s.round_s_median for s in seeds]),
                         serverless_usd=over([s.serverless_usd for s in seeds]),
                         serverful_usd=over([s.serverful_usd for s in seeds]),
                         final_return=over(returns) if returns else None)
