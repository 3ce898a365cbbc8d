"""Nitro's headline re-measured (issue 30): best return per dollar, Nitro against its baselines, IQM over seeds.

Arms (one base config, ``--config``, default configs/nitro-hopper.yaml; I_min/I_max from ``--min-actors`` /
``--max-actors``, default the config's):

    nitro-paper    actors.scaling: nitro, variant paper          (nitro/scaler.py, nitro/probe.py)
    nitro-authors  actors.scaling: nitro, variant authors_code   (nitro/scaler_authors.py, nitro/probe_authors.py)
    fixed-min      fixed(I_min)
    fixed-max      fixed(I_max)
    hydrozoa       doubling from I_min to I_max every ``--double-every`` rounds
    max            max(I_max)

Each arm runs ``--rounds`` rounds for each of ``--seeds`` (≥ 5 for the record), seed-major (a slow spell on the
machine hits every arm alike). Per run: the best training return (the highest moving mean over the run's rounds),
the run's serverless cost (ledger), **best return per dollar** (the headline: Nitro's claim is the best of all
arms), the final policy's evaluation return over ``--eval-episodes`` deterministic episodes from seed 12345, and
evaluation return per dollar. Per arm: the interquartile mean with a 95 % stratified bootstrap interval
(``nimbus.analysis.stats.aggregate``) of each; per Nitro arm and baseline: P(Nitro's run beats the baseline's)
on best return per dollar (``probability_of_improvement``), with its interval.

Paper scale needs the simulated backend (issue 30, ``runtime.backend: simulated``) once it exists:
``--min-actors 8 --max-actors 64 --set runtime.backend=simulated``. ``--set`` applies to every arm.

Run:  python benchmarks/nitro_remeasure.py --seeds 0 1 2 3 4            (benchmarks/results/nitro_remeasure.json)
      python benchmarks/nitro_remeasure.py --smoke                       (CartPole, 2 rounds, 1 seed: about 2 minutes)
      python benchmarks/nitro_remeasure.py --merge a.json b.json --output all.json   (runs split across invocations)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from nimbus.analysis.stats import Interval, aggregate, probability_of_improvement
from nimbus.config import load_config
from nimbus.roles.evaluate import evaluate_checkpoint
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[1]
EVAL_SEED = 12345
NITRO_ARMS = ("nitro-paper", "nitro-authors")
BASELINES = ("fixed-min", "fixed-max", "hydrozoa", "max")
METRICS = ("best_return_per_usd", "best_return", "cost_usd", "eval_return", "eval_return_per_usd", "env_steps",
           "mean_actors")
log = logging.getLogger("nitro_remeasure")


@dataclass(frozen=True)
class RunScore:
    arm: str
    seed: int
    run_dir: str
    best_return: float             # the highest training return (moving mean) over the run's rounds
    cost_usd: float
    best_return_per_usd: float
    eval_return: float             # the final policy, deterministic, EVAL_SEED
    eval_return_per_usd: float
    env_steps: int
    wall_s: float
    mean_actors: float
    probe_share_median: float | None   # None for arms without a probe
    probe_s_median: float | None


def scaling_override(*, arm: str, min_actors: int, max_actors: int, double_every: int) -> str:
    """The ``actors.scaling`` section of ``arm`` as one ``--set`` override (flow-style YAML)."""
    sections = {
        "nitro-paper": f"{{kind: nitro, min_actors: {min_actors}, max_actors: {max_actors}, variant: paper}}",
        "nitro-authors": f"{{kind: nitro, min_actors: {min_actors}, max_actors: {max_actors}, variant: authors_code}}",
        "fixed-min": f"{{kind: fixed, num_actors: {min_actors}}}",
        "fixed-max": f"{{kind: fixed, num_actors: {max_actors}}}",
        "hydrozoa": (f"{{kind: hydrozoa, initial_actors: {min_actors}, max_actors: {max_actors}, "
                     f"double_every_rounds: {double_every}}}"),
        "max": f"{{kind: max, max_actors: {max_actors}}}",
    }
    return f"actors.scaling={sections[arm]}"


def hessian_overrides(*, arm: str, args: argparse.Namespace) -> list[str]:
    """Lanczos steps: the authors' 100 for authors_code (no convergence test: fewer steps change their R), the base
    config's for the paper probe (configs/nitro-hopper.yaml: 30, measured equal to 100 there) unless given."""
    steps = {"nitro-authors": args.authors_iterations, "nitro-paper": args.paper_iterations}.get(arm)
    return [] if steps is None else [f"actors.scaling.hessian.max_iterations={steps}"]


def run_arm(*, arm: str, seed: int, args: argparse.Namespace) -> RunScore:
    overrides = [f"seed={seed}", f"train.max_rounds={args.rounds}", f"output.root_dir={args.root}",
                 "output.status_line=false",
                 scaling_override(arm=arm, min_actors=args.min_actors, max_actors=args.max_actors,
                                  double_every=args.double_every),
                 *hessian_overrides(arm=arm, args=args), *args.set]
    config = load_config(path=REPO / args.config, overrides=overrides)
    result = train(config=config, run_dir=args.root / f"{arm}-s{seed}")
    rows, summary = result.rows, result.summary
    returns = [r.return_mean for r in rows if r.return_mean is not None]
    best, cost = (max(returns) if returns else 0.0), summary.serverless_cost_usd
    evaluated = evaluate_checkpoint(path=result.run_dir, episodes=args.eval_episodes, seed=EVAL_SEED, explore=False)
    shares = [r.extras["probe_share"] for r in rows if "probe_share" in r.extras]
    probe_s = [r.extras["probe_s"] for r in rows if "probe_s" in r.extras]
    return RunScore(arm=arm, seed=seed, run_dir=str(result.run_dir), best_return=float(best), cost_usd=cost,
                    best_return_per_usd=best / cost, eval_return=evaluated.mean_return,
                    eval_return_per_usd=evaluated.mean_return / cost, env_steps=summary.env_steps,
                    wall_s=summary.wall_s, mean_actors=float(np.mean([r.num_actors for r in rows])),
                    probe_share_median=float(np.median(shares)) if shares else None,
                    probe_s_median=float(np.median(probe_s)) if probe_s else None)


def interval(values: list[float]) -> dict[str, float | None]:
    """IQM over seeds with its 95 % bootstrap interval (one task: this env)."""
    result: Interval = aggregate(scores_by_task=[np.asarray(values, dtype=np.float64)], statistic="iqm")
    return {"iqm": result.point, "low": result.low, "high": result.high, "n": len(values)}


def summarise(*, runs: list[RunScore]) -> dict[str, dict]:
    arms = list(dict.fromkeys(r.arm for r in runs))
    table = {arm: {metric: interval([getattr(r, metric) for r in runs if r.arm == arm]) for metric in METRICS}
             for arm in arms}
    for nitro in (a for a in NITRO_ARMS if a in arms):
        mine = np.asarray([r.best_return_per_usd for r in runs if r.arm == nitro])
        table[nitro]["p_beats"] = {
            base: asdict(probability_of_improvement(
                x_by_task=[mine], y_by_task=[np.asarray([r.best_return_per_usd for r in runs if r.arm == base])]))
            for base in arms if base != nitro}
    return table


def markdown(*, table: dict[str, dict]) -> str:
    def cell(entry: dict, fmt: str) -> str:
        low, high = entry["low"], entry["high"]
        bounds = "" if low is None else f" [{fmt.format(low)}, {fmt.format(high)}]"
        return f"{fmt.format(entry['iqm'])}{bounds}"

    lines = ["| arm | best return per USD | best return | cost (USD) | eval return | env steps | mean actors |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for arm, e in table.items():
        lines.append(f"| {arm} | {cell(e['best_return_per_usd'], '{:,.0f}')} | {cell(e['best_return'], '{:.0f}')} | "
                     f"{cell(e['cost_usd'], '{:.4f}')} | {cell(e['eval_return'], '{:.0f}')} | "
                     f"{e['env_steps']['iqm']:,.0f} | {e['mean_actors']['iqm']:.2f} |")
    lines.append("")
    for arm, e in table.items():
        for base, p in e.get("p_beats", {}).items():
            bounds = "" if p["low"] is None else f" [{p['low']:.2f}, {p['high']:.2f}]"
            lines.append(f"- P({arm} beats {base} on best return per USD) = {p['point']:.2f}{bounds}")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/nitro-hopper.yaml", help="base config, relative to the repo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--arms", nargs="+", default=[*NITRO_ARMS, *BASELINES], choices=[*NITRO_ARMS, *BASELINES])
    parser.add_argument("--min-actors", type=int, default=None, help="I_min (default: the base config's)")
    parser.add_argument("--max-actors", type=int, default=None, help="I_max (default: the base config's)")
    parser.add_argument("--double-every", type=int, default=10, help="hydrozoa's rounds between doublings")
    parser.add_argument("--authors-iterations", type=int, default=100, help="Lanczos steps of the authors' probe")
    parser.add_argument("--paper-iterations", type=int, default=None,
                        help="Lanczos steps of the paper probe (default: the base config's)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="CartPole, every arm, 1 seed, 2 rounds, I 1..2")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="config override for every arm (e.g. runtime.backend=simulated)")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, help="one table from these results' runs")
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "nitro-remeasure")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "nitro_remeasure.json")
    args = parser.parse_args()
    if args.smoke:
        args.config, args.seeds, args.rounds, args.eval_episodes = "configs/ppo-cartpole.yaml", [0], 2, 2
        args.min_actors, args.max_actors, args.double_every = 1, 2, 1
        args.authors_iterations, args.paper_iterations = 20, 20
        args.set = ["algo.minibatch_size=64", *args.set]          # one actor's round: 4 envs × 32 steps
    return args


def fill_actor_range(args: argparse.Namespace) -> None:
    """I_min/I_max default to the base config's nitro section (or its fixed count for both)."""
    scaling = load_config(path=REPO / args.config).actors.scaling
    default_min = getattr(scaling, "min_actors", getattr(scaling, "num_actors", 1))
    default_max = getattr(scaling, "max_actors", getattr(scaling, "num_actors", default_min))
    args.min_actors = default_min if args.min_actors is None else args.min_actors
    args.max_actors = default_max if args.max_actors is None else args.max_actors


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.merge:
        merge(paths=args.merge, output=args.output)
        return
    fill_actor_range(args)
    started, runs = time.perf_counter(), []
    for seed in args.seeds:
        for arm in args.arms:
            runs.append(run_arm(arm=arm, seed=seed, args=args))
            log.info("%s seed %d: best return %.1f, $%.5f, %.0f per USD, %.0f s", arm, seed, runs[-1].best_return,
                     runs[-1].cost_usd, runs[-1].best_return_per_usd, runs[-1].wall_s)
    table = summarise(runs=runs)
    result = {"command": " ".join(sys.argv), "config": args.config, "actors": [args.min_actors, args.max_actors],
              "seeds": args.seeds, "rounds": args.rounds, "total_s": time.perf_counter() - started,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                          "load_avg_at_end": os.getloadavg()},
              "arms": table, "runs": [asdict(r) for r in runs]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    print(markdown(table=table))
    print(f"\n{len(runs)} runs in {result['total_s'] / 60:.1f} min; results {args.output}")


def merge(*, paths: list[Path], output: Path) -> None:
    """The runs of several result files (arms or seeds split across invocations) in one table."""
    runs = [RunScore(**run) for path in paths for run in json.loads(path.read_text())["runs"]]
    table = summarise(runs=runs)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"merged": [str(p) for p in paths], "arms": table,
                                  "runs": [asdict(r) for r in runs]}, indent=1))
    print(markdown(table=table))


if __name__ == "__main__":
    main()
