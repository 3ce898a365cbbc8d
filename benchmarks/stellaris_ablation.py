"""Stellaris's ablation where staleness matters (issue 26, "Show the effect"): the paper's arms, with stragglers.

PPO on CartPole-v1 (configs/stellaris-cartpole.yaml: 512 env steps and 16 minibatch gradients a round), every
arm the same number of rounds (so the same env steps) on the stellaris workflow. Staleness is made real
with ``stellaris.stragglers`` (a benchmark aid: learner slot 0 computes ``--straggler-factor`` times slower).

Arms (``stellaris.learners`` 4 and the straggler, except ``ppo``):

    ppo                      plain synchronous PPO: one learner, rule sync, no truncation, no straggler. 16
                             optimizer steps a round, each on a fresh gradient: PPO's own update
    sync                     rule sync: each step averages the 4 gradients of one version, so 4 steps a round
                             (the rule does not allow 16: stated, not equalised)
    softsync                 every 2 gradients one step (8 a round)
    ssp                      each gradient a step, a slot ≤ 1 applied gradient ahead of the slowest (16 a round)
    async                    each gradient a step on arrival (16 a round)
    stellaris                the paper's rule and truncation form (paper), Eq. 4 as the step's learning rate;
                             its queue averages what it admits, so ≤ 16 steps a round, and it refuses some
    stellaris_code           the authors' code: queue flushed as separate steps (≤ 16 a round)
    stellaris-no-truncation  stellaris with ``truncation: none``

Per run: the mean return of ``--eval-episodes`` deterministic episodes of the final policy (fixed seeds), the
training return (100-episode window), time and serverless cost to the first round whose training return
reaches ``--target`` (None if never), the variance of the training return over the last ``--tail`` rounds,
the staleness histogram over the run, gradients per aggregation, optimizer steps, refusals, and the
parameter function's share of WALL time (Σ parameter seconds / the run's wall time: rounds overlap here, so
dividing by summed round time, as the issue-12 version did, understated it). Per arm: IQM with a 95 %
stratified bootstrap interval (nimbus.analysis.stats, rliable's method) of the evaluation return and of the
time and cost to the target (over the seeds that reached it), and whether the arm learned (evaluation IQM
≥ ``--learned``, 100 by default: 4.5 × a random policy's ~22). Then each of the paper's claims (2.2× reward,
−41 % cost, lower variance with truncation, parameter overhead < 5 %) as measured here.

Run:  python benchmarks/stellaris_ablation.py                  (8 arms × 5 seeds × 60 rounds; writes
                                                                 benchmarks/results/stellaris_ablation.json)
      python benchmarks/stellaris_ablation.py --smoke          (2 arms, 1 seed, 3 rounds: under a minute)
      python benchmarks/stellaris_ablation.py --merge a.json b.json --output all.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from nimbus.analysis.stats import aggregate
from nimbus.config import load_config
from nimbus.report.metrics import read_metrics
from nimbus.roles.evaluate import evaluate_checkpoint
from nimbus.run.loop import train
from nimbus.run.summary import RunSummary, TrainResult
from nimbus.types import RoundMetrics

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interval_cell  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "stellaris-cartpole.yaml"
ONE_LEARNER = ["stellaris.learners=1", "stellaris.stragglers={learners: [], factor: 1.0}"]
ARMS: dict[str, list[str]] = {
    "ppo": ["stellaris.rule=sync", "stellaris.truncation=none", *ONE_LEARNER],
    "sync": ["stellaris.rule=sync"],
    "softsync": ["stellaris.rule=softsync", "stellaris.softsync_k=2"],
    "ssp": ["stellaris.rule=ssp", "stellaris.ssp_bound=1"],
    "async": ["stellaris.rule=async"],
    "stellaris": ["stellaris.rule=stellaris", "stellaris.truncation=paper"],
    "stellaris_code": ["stellaris.rule=stellaris_code"],
    "stellaris-no-truncation": ["stellaris.rule=stellaris", "stellaris.truncation=none"],
}
BASELINES = ("ppo", "sync", "softsync", "ssp", "async")
EVAL_SEED = 12345
log = logging.getLogger("stellaris_ablation")


@dataclass(frozen=True)
class Run:
    arm: str
    seed: int
    eval_return: float
    final_return: float
    tail_variance: float          # variance of the per-round training return over the last rounds
    cost_usd: float
    wall_s: float
    env_steps: int
    time_to_target_s: float | None
    cost_to_target_usd: float | None
    parameter_wall_share: float   # Σ parameter-function seconds / wall seconds
    refused_share: float          # gradients refused / gradients computed
    optimizer_steps: int
    gradients_per_aggregation: float
    staleness_counts: dict[str, float] = field(default_factory=dict)   # staleness/count_* summed over the run
    staleness_mean: float = float("nan")   # mean over rounds of staleness/mean
    staleness_max: float = float("nan")    # largest staleness/max of the run
    # per round: (wall_s, cost_usd, training return over the return window): reward at equal time or cost
    curve: list[tuple[float, float, float]] = field(default_factory=list)


def _to_target(*, rows: list, target: float) -> tuple[float | None, float | None]:
    for row in rows:
        if row.extras.get("recent_return_mean", float("nan")) >= target:
            return row.wall_s, row.cost_usd
    return None, None


def run_arm(*, arm: str, seed: int, rounds: int, root: Path, extra: list[str], eval_episodes: int, tail: int,
            target: float, straggler_factor: float, learners: int = 4, common: tuple[str, ...] = ()) -> Run:
    """One arm, one seed. ``common`` (e.g. the simulated backend's keys) comes after the ablation's settings and
    before the arm's own ``extra``; ``straggler_factor`` 1 turns the benchmark aid off."""
    stragglers = "[0]" if straggler_factor > 1.0 else "[]"
    overrides = [f"seed={seed}", f"train.max_rounds={rounds}", "train.total_env_steps=10000000",
                 "train.target_return=null", f"stellaris.learners={learners}",
                 f"stellaris.stragglers={{learners: {stragglers}, factor: {straggler_factor}}}",
                 f"output.root_dir={root}", "output.status_line=false", "output.loggers=[]", "output.report=false",
                 "train.eval_episodes=0", *common, *extra]
    result = train(config=load_config(path=CONFIG, overrides=overrides), run_dir=root / f"{arm}-s{seed}")
    return measured(arm=arm, seed=seed, result=result, eval_episodes=eval_episodes, tail=tail, target=target)


def collected(*, run_dir: Path, eval_episodes: int, tail: int, target: float) -> Run:
    """The Run of a finished run directory ``<arm>-s<seed>`` (its metrics.jsonl, summary.json and checkpoint),
    as run_arm measured it: for runs whose benchmark process was stopped before it wrote its JSON."""
    arm, _, seed = run_dir.name.rpartition("-s")
    if arm not in ARMS or not seed.isdigit() or not (run_dir / "summary.json").is_file():
        raise ValueError(f"{run_dir}: not a finished run directory <arm>-s<seed> (arms: {', '.join(ARMS)})")
    names = {f.name for f in fields(RoundMetrics)}   # a row also carries keys beyond the dataclass (runtime, ...)
    rows = [RoundMetrics(**{k: v for k, v in row.items() if k in names})
            for row in read_metrics(path=run_dir / "metrics.jsonl")]
    summary = RunSummary(**json.loads((run_dir / "summary.json").read_text()))
    return measured(arm=arm, seed=int(seed), result=TrainResult(run_dir=run_dir, summary=summary, rows=rows),
                    eval_episodes=eval_episodes, tail=tail, target=target)


def measured(*, arm: str, seed: int, result: TrainResult, eval_episodes: int, tail: int, target: float) -> Run:
    rows = result.rows
    evaluated = evaluate_checkpoint(path=result.run_dir, episodes=eval_episodes, seed=EVAL_SEED, explore=False)
    returns = [r.return_mean for r in rows[-tail:] if r.return_mean is not None]
    refused = sum(r.extras["staleness/rejected"] for r in rows)
    admitted = sum(r.extras["staleness/admitted"] for r in rows)
    separate = arm == "stellaris_code"   # each admitted gradient is its own step
    counts = Counter()
    for row in rows:
        counts.update({k: v for k, v in row.extras.items() if k.startswith("staleness/count_")})
    time_s, cost = _to_target(rows=rows, target=target)
    return Run(arm=arm, seed=seed, eval_return=evaluated.mean_return,
               final_return=float(result.summary.final_return or 0.0),
               tail_variance=float(np.var(returns)) if returns else float("nan"),
               cost_usd=result.summary.serverless_cost_usd, wall_s=result.summary.wall_s,
               env_steps=result.summary.env_steps, time_to_target_s=time_s, cost_to_target_usd=cost,
               parameter_wall_share=sum(r.extras["staleness/parameter_s"] for r in rows) / max(result.summary.wall_s,
                                                                                                1e-9),
               refused_share=refused / max(refused + admitted, 1.0),
               optimizer_steps=int(admitted if separate else sum(r.extras["staleness/aggregations"] for r in rows)),
               gradients_per_aggregation=float(np.mean([r.extras["staleness/gradients_per_aggregation"]
                                                        for r in rows])),
               staleness_counts=dict(sorted(counts.items())),
               staleness_mean=float(np.nanmean([r.extras.get("staleness/mean", np.nan) for r in rows])),
               staleness_max=float(np.nanmax([r.extras.get("staleness/max", np.nan) for r in rows])),
               curve=[(r.wall_s, r.cost_usd, r.extras.get("recent_return_mean", float("nan"))) for r in rows])


def _interval(values: list[float]) -> dict[str, float | None] | None:
    if not values:
        return None
    found = aggregate(scores_by_task=[np.asarray(values, dtype=np.float64)], statistic="iqm")
    return {"iqm": found.point, "low": found.low, "high": found.high, "runs": len(values)}


def table(*, runs: list[Run], learned: float) -> dict[str, dict]:
    out = {}
    for arm in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == arm]
        reached = [r for r in mine if r.time_to_target_s is not None]
        counts = Counter()
        for r in mine:
            counts.update(r.staleness_counts)
        evaluation = _interval([r.eval_return for r in mine])
        out[arm] = {"seeds": len(mine), "eval_return": evaluation,
                    "final_return": _interval([r.final_return for r in mine]),
                    "learned": evaluation["iqm"] >= learned,
                    "reached_target": len(reached),
                    "time_to_target_s": _interval([r.time_to_target_s for r in reached]),
                    "cost_to_target_usd": _interval([r.cost_to_target_usd for r in reached]),
                    "tail_variance": _interval([r.tail_variance for r in mine if np.isfinite(r.tail_variance)]),
                    "cost_usd": _interval([r.cost_usd for r in mine]), "wall_s": _interval([r.wall_s for r in mine]),
                    "parameter_wall_share": float(np.mean([r.parameter_wall_share for r in mine])),
                    "refused_share": float(np.mean([r.refused_share for r in mine])),
                    "optimizer_steps": float(np.mean([r.optimizer_steps for r in mine])),
                    "gradients_per_aggregation": float(np.mean([r.gradients_per_aggregation for r in mine])),
                    "staleness_counts": dict(sorted(counts.items()))}
    return out


def claims(summary: dict[str, dict]) -> list[str]:
    """The paper's claims, each as measured here (IQMs; None where an arm is missing or never reached the target)."""
    def iqm(arm: str, key: str) -> float | None:
        entry = summary.get(arm, {}).get(key)
        return entry["iqm"] if entry else None
    lines = []
    stellaris, baselines = iqm("stellaris", "eval_return"), {a: iqm(a, "eval_return") for a in BASELINES}
    best = max((a for a in baselines if baselines[a] is not None), key=lambda a: baselines[a], default=None)
    if stellaris is not None and best is not None:
        lines.append(f"2.2x reward: stellaris {stellaris:.0f} vs best baseline {best} {baselines[best]:.0f} "
                     f"= {stellaris / max(baselines[best], 1e-9):.2f}x")
    cost = {a: iqm(a, "cost_to_target_usd") for a in ("stellaris", *BASELINES)}
    cheapest = min((a for a in BASELINES if cost[a] is not None), key=lambda a: cost[a], default=None)
    if cost["stellaris"] is not None and cheapest is not None:
        lines.append(f"-41% cost to target: stellaris {cost['stellaris']:.5f} USD vs {cheapest} {cost[cheapest]:.5f} "
                     f"= {100 * (cost['stellaris'] / cost[cheapest] - 1):+.0f}%")
    else:
        lines.append("-41% cost to target: not measurable (an arm never reached the target)")
    with_cut, without = iqm("stellaris", "tail_variance"), iqm("stellaris-no-truncation", "tail_variance")
    if with_cut is not None and without is not None:
        lines.append(f"lower variance with truncation: tail variance {with_cut:.0f} with vs {without:.0f} without")
    share = summary.get("stellaris", {}).get("parameter_wall_share")
    if share is not None:
        lines.append(f"parameter overhead < 5%: {share:.1%} of wall time")
    return lines


cell = interval_cell   # stellaris_paper_scale imports it from here


def add_shared_arguments(*, parser: argparse.ArgumentParser, root: Path, output: Path) -> None:
    """The flags this script and benchmarks/stellaris_paper_scale.py share."""
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--target", type=float, default=195.0, help="training return (100-episode window)")
    parser.add_argument("--learned", type=float, default=100.0, help="evaluation IQM an arm must reach")
    parser.add_argument("--tail", type=int, default=10, help="rounds in the return variance")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--root", type=Path, default=root)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--merge", nargs="+", type=Path)
    parser.add_argument("--output", type=Path, default=output)


def markdown(summary: dict[str, dict]) -> str:
    lines = ["| arm | eval return IQM [95 %] | learned | reached target | time to target (s) | cost to target (USD) "
             "| tail variance | optimizer steps (run) | grads/agg | refused | parameter share of wall |",
             "|" + " --- |" * 11]
    for arm, s in summary.items():
        lines.append(f"| {arm} | {cell(s['eval_return'], '.0f')} | {'yes' if s['learned'] else 'no'} | "
                     f"{s['reached_target']}/{s['seeds']} | {cell(s['time_to_target_s'], '.1f')} | "
                     f"{cell(s['cost_to_target_usd'], '.5f')} | {cell(s['tail_variance'], '.0f')} | "
                     f"{s['optimizer_steps']:.0f} | {s['gradients_per_aggregation']:.2f} | {s['refused_share']:.0%} | "
                     f"{s['parameter_wall_share']:.1%} |")
    lines.append("")
    lines += [f"staleness {arm}: {s['staleness_counts']}" for arm, s in summary.items()]
    return "\n".join(lines + [""] + claims(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--straggler-factor", type=float, default=4.0)
    add_shared_arguments(parser=parser, root=REPO / "runs" / "stellaris-ablation",
                         output=REPO / "benchmarks" / "results" / "stellaris_ablation.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.merge:
        runs = [Run(**r) for path in args.merge for r in json.loads(path.read_text())["runs"]]
    else:
        arms = ["ppo", "stellaris"] if args.smoke else args.arms
        seeds, rounds = ([0], 3) if args.smoke else (args.seeds, args.rounds)
        runs = []
        for seed in seeds:                       # seed-major: the arms of one seed run back to back
            for arm in arms:
                run = run_arm(arm=arm, seed=seed, rounds=rounds, root=args.root, extra=ARMS[arm],
                              eval_episodes=2 if args.smoke else args.eval_episodes, tail=args.tail,
                              target=args.target, straggler_factor=args.straggler_factor)
                log.info("%s seed %d: eval %.1f, wall %.1f s, refused %.0f%%, parameter %.1f%% of wall", arm, seed,
                         run.eval_return, run.wall_s, 100 * run.refused_share, 100 * run.parameter_wall_share)
                runs.append(run)
    summary = table(runs=runs, learned=args.learned)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                   "torch": torch.__version__, "load_1m": os.getloadavg()[0]},
                                       "args": {k: str(v) for k, v in vars(args).items()},
                                       "runs": [asdict(r) for r in runs], "summary": summary}, indent=2))
    print(markdown(summary))


if __name__ == "__main__":
    main()
