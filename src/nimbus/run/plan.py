"""The simulated planner (``nimbus plan --simulate``): time, cost and return at a target scale, over seeds.

Each seed is a whole training run of the config on the simulated backend (``runtime.backend: simulated``,
docs/simulated.md): its durations come from ``simulation:`` (a profile fitted from real runs, a hardware file),
its learning is real. So the return at 1,000 actors is learned, not extrapolated, and stragglers, queueing, cold
starts and staleness act on it as they would on the simulated cluster. Per seed: the simulated wall time, the
median round time, the serverless and serverful bills and the final return; over the seeds: the interquartile
mean of each with its 95 % stratified-bootstrap interval (analysis/stats.py ``aggregate``).

Every seed's config is loaded (and refused, exit 2 naming the key) before the first run starts.

Example::

    configs = plan_configs(config_path=Path("configs/stellaris-cartpole.yaml"), seeds=[0, 1, 2],
                           overrides=["actors.scaling.num_actors=1000", "stellaris.learners=16"])
    plan = aggregate_seeds(seeds=[run_seed(config=c, run_dir=tmp / f"seed-{c.seed}") for c in configs])
    plan.final_return.point, plan.final_return.low, plan.final_return.high
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nimbus.analysis.stats import Interval, aggregate
from nimbus.config import NimbusConfig, load_config

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


def run_seed(*, config: NimbusConfig, run_dir: Path) -> SeedPlan:
    """Train ``config`` (simulated) into ``run_dir`` and keep its figures."""
    from nimbus.run.loop import train

    result = train(config=config, run_dir=run_dir)
    summary = result.summary
    rounds_s = [row.round_s for row in result.rows] or [summary.wall_s]
    return SeedPlan(seed=config.seed, run_dir=str(run_dir), rounds=summary.rounds, env_steps=summary.env_steps,
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
