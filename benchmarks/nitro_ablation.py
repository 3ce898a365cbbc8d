"""Nitro's ablation at this machine's scale (issue 15, item 6): six arms, ≥ 5 seeds.

Arms: nitro (paper), nitro-authors (``variant: authors_code``), fixed(I_min), fixed(I_max), hydrozoa, and
nitro-budget (paper, ``budget_usd: --budget-usd``, ``on_budget: stop``). PPO on Hopper-v5
(configs/nitro-hopper*.yaml), the same number of rounds for every arm, ``--seeds`` seeds each, run one
after another on the local backend. Per arm: the return of ``--eval-episodes`` deterministic evaluation
episodes of the final policy from a fixed seed (12345; the same episodes for every arm), the training
return (moving mean of the last 20 training episodes), total serverless cost (ledger), evaluation
return per dollar, each as mean ± sample std and min..max across seeds; env steps, wall time, mean
actors per round. ``--merge`` combines the JSON of several invocations (e.g. arms split across runs so
each stays under 10 minutes) into one table. For the nitro arm: the
Hessian probe's time as a share of round time (per round: probe_s / round_s, both measured inside the
run), and a subset-size sweep on the final policy of the first nitro run
(benchmarks/nitro_probe_sweep.py). All runs also go on one ``compare.png`` (``nimbus compare``).

Run:  python benchmarks/nitro_ablation.py                 (writes benchmarks/results/nitro_ablation.json)
      python benchmarks/nitro_ablation.py --smoke               (2 arms, 1 seed, 2 rounds: seconds)
      python benchmarks/nitro_ablation.py --merge a.json b.json --output all.json
      python benchmarks/nitro_ablation.py --arms nitro --set actors.scaling.hessian.max_iterations=15 \
          --sweep-rows 0 --root runs/nitro-iter15 --output benchmarks/results/nitro_probe_iter15.json
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nimbus.config import load_config  # noqa: E402
from nimbus.report.compare import compare_runs  # noqa: E402
from nimbus.roles.evaluate import evaluate_checkpoint  # noqa: E402
from nimbus.run.loop import train  # noqa: E402
from nitro_probe_sweep import rollout_batch, sweep  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NITRO = "configs/nitro-hopper.yaml"
ARMS = {"nitro": (NITRO, []), "nitro-authors": (NITRO, ["actors.scaling.variant=authors_code"]),
        "fixed-min": ("configs/nitro-hopper-fixed-min.yaml", []),
        "fixed-max": ("configs/nitro-hopper-fixed-max.yaml", []),
        "hydrozoa": ("configs/nitro-hopper-hydrozoa.yaml", []),
        "nitro-budget": (NITRO, ["actors.scaling.on_budget=stop"])}   # + budget_usd from --budget-usd
EVAL_SEED = 12345
log = logging.getLogger("nitro_ablation")


@dataclass(frozen=True)
class ArmRun:
    arm: str
    seed: int
    run_dir: str
    eval_return: float             # mean over the evaluation episodes (deterministic, fixed seed)
    final_return: float
    cost_usd: float
    return_per_usd: float
    env_steps: int
    wall_s: float
    rounds: int
    mean_actors: float
    round_s: list[float]
    probe_s: list[float]           # empty for arms without a probe
    probe_share: list[float]
    probes_converged: int
    probes_skipped: int


def run_arm(*, arm: str, seed: int, rounds: int, root: Path, overrides: list[str], eval_episodes: int,
            budget_usd: float) -> ArmRun:
    path, arm_overrides = ARMS[arm]
    if arm == "nitro-budget":
        arm_overrides = [*arm_overrides, f"actors.scaling.budget_usd={budget_usd}"]
    config = load_config(path=REPO / path, overrides=[f"seed={seed}", f"train.max_rounds={rounds}",
                                                      f"output.root_dir={root}", "output.status_line=false",
                                                      *arm_overrides, *overrides])
    result = train(config=config, run_dir=root / f"{arm}-s{seed}")
    rows, summary = result.rows, result.summary
    final, cost = float(summary.final_return or 0.0), summary.serverless_cost_usd
    evaluated = evaluate_checkpoint(path=result.run_dir, episodes=eval_episodes, seed=EVAL_SEED, explore=False)
    probes = [r.extras for r in rows if "probe_s" in r.extras]
    return ArmRun(arm=arm, seed=seed, run_dir=str(result.run_dir), eval_return=evaluated.mean_return,
                  final_return=final, cost_usd=cost, return_per_usd=evaluated.mean_return / cost,
                  env_steps=summary.env_steps, wall_s=summary.wall_s,
                  rounds=summary.rounds, mean_actors=float(np.mean([r.num_actors for r in rows])),
                  round_s=[r.round_s for r in rows], probe_s=[e["probe_s"] for e in probes],
                  probe_share=[e["probe_share"] for e in probes],
                  probes_converged=sum(e.get("hessian_converged") == 1.0 for e in probes),
                  probes_skipped=int(max([e.get("skipped_probes", 0.0) for e in probes] + [0.0])))


def spread(values: list[float]) -> dict[str, float]:
    """mean, sample std (0 for one value), min and max."""
    return {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            "min": float(np.min(values)), "max": float(np.max(values))}


def aggregate(*, runs: list[ArmRun]) -> dict[str, dict]:
    table = {}
    for arm in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == arm]
        entry = {key: spread([getattr(r, key) for r in mine])
                 for key in ("eval_return", "final_return", "cost_usd", "return_per_usd", "env_steps", "wall_s",
                             "mean_actors")}
        shares = [s for r in mine for s in r.probe_share]
        if shares:
            entry["probe"] = {"share_mean": float(np.mean(shares)), "share_median": float(np.median(shares)),
                              "share_p90": float(np.percentile(shares, 90)), "share_max": float(np.max(shares)),
                              "probe_s_median": float(np.median([s for r in mine for s in r.probe_s])),
                              "round_s_median": float(np.median([s for r in mine for s in r.round_s])),
                              "converged": sum(r.probes_converged for r in mine), "probes": len(shares),
                              "skipped": sum(r.probes_skipped for r in mine)}
        table[arm] = entry
    return table


def ranking(*, runs: list[ArmRun]) -> dict[int, list[str]]:
    """Per seed, the arms from best to worst return per dollar (cost is billed by duration, so arms run
    back to back under the same machine load compare more fairly within a seed than across seeds)."""
    seeds = sorted({r.seed for r in runs})
    return {seed: [r.arm for r in sorted((r for r in runs if r.seed == seed), key=lambda r: -r.return_per_usd)]
            for seed in seeds}


def markdown(*, table: dict[str, dict]) -> str:
    lines = ["| arm | eval return | training return | total cost (USD) | eval return per USD | env steps | wall (s) "
             "| mean actors |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def cell(e: dict, key: str, fmt: str) -> str:
        s = e[key]
        return f"{fmt.format(s['mean'])} ± {fmt.format(s['std'])} ({fmt.format(s['min'])}..{fmt.format(s['max'])})"

    for arm, e in table.items():
        lines.append(f"| {arm} | {cell(e, 'eval_return', '{:.0f}')} | {cell(e, 'final_return', '{:.0f}')} | "
                     f"{cell(e, 'cost_usd', '{:.4f}')} | "
                     f"{cell(e, 'return_per_usd', '{:,.0f}')} | {e['env_steps']['mean']:,.0f} | "
                     f"{e['wall_s']['mean']:.0f} | {e['mean_actors']['mean']:.2f} |")
    return "\n".join(lines)


def probe_sweep(*, runs: list[ArmRun], table: dict[str, dict], rows: int) -> list[dict]:
    nitro = [r for r in runs if r.arm == "nitro"]
    if not nitro:
        return []
    torch.set_num_threads(1)   # as in a learner worker
    algo, model, batch = rollout_batch(run_dir=Path(nitro[0].run_dir), rows=rows)
    points = sweep(algo=algo, model=model, batch=batch, subset_sizes=[64, 128, 256, 512, 1024, rows],
                   iterations=[30, 100], repeats=3, round_s=table["nitro"]["probe"]["round_s_median"])
    return [asdict(p) for p in points]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--budget-usd", type=float, default=0.002,
                        help="nitro-budget's budget: about half of what the nitro arm cost at low load (0.0038)")
    parser.add_argument("--smoke", action="store_true", help="nitro and nitro-authors, 1 seed, 2 rounds")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, help="combine these results' runs")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "nitro-ablation")
    parser.add_argument("--sweep-rows", type=int, default=2048, help="0: no subset-size sweep")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="config override for every arm, e.g. actors.scaling.hessian.max_iterations=15")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "nitro_ablation.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.merge:
        merge(paths=args.merge, output=args.output)
        return
    if args.smoke:
        args.seeds, args.rounds, args.arms = [0], 2, ["nitro", "nitro-authors"]
        args.sweep_rows, args.eval_episodes = 0, 2
    started = time.perf_counter()
    runs = []
    for seed in args.seeds:          # seed-major: a slow spell on the shared machine hits every arm alike
        for arm in args.arms:
            runs.append(run_arm(arm=arm, seed=seed, rounds=args.rounds, root=args.root, overrides=args.set,
                                eval_episodes=args.eval_episodes, budget_usd=args.budget_usd))
            log.info("%s seed %d: eval return %.1f cost $%.4f wall %.0f s", arm, seed, runs[-1].eval_return,
                     runs[-1].cost_usd, runs[-1].wall_s)
    training_s = time.perf_counter() - started
    table = aggregate(runs=runs)
    compare_runs(run_dirs=[Path(r.run_dir) for r in runs], output=args.root / "compare.png")
    points = probe_sweep(runs=runs, table=table, rows=args.sweep_rows) if args.sweep_rows else []
    result = {"command": " ".join(sys.argv), "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
              "python": platform.python_version(), "torch": torch.__version__,
              "load_avg_at_end": os.getloadavg()}, "seeds": args.seeds, "rounds": args.rounds,
              "training_s": training_s, "total_s": time.perf_counter() - started, "arms": table,
              "rank_return_per_usd": ranking(runs=runs), "probe_sweep": points, "runs": [asdict(r) for r in runs]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    print(markdown(table=table))
    print(f"\nablation {training_s / 60:.1f} min; figure {args.root / 'compare.png'}; results {args.output}")


def merge(*, paths: list[Path], output: Path) -> None:
    """One table from the runs of several result files (arms or seeds split across invocations)."""
    runs = [ArmRun(**run) for path in paths for run in json.loads(path.read_text())["runs"]]
    table = aggregate(runs=runs)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"merged": [str(p) for p in paths], "arms": table,
                                  "rank_return_per_usd": ranking(runs=runs), "runs": [asdict(r) for r in runs]},
                                 indent=1))
    print(markdown(table=table))


if __name__ == "__main__":
    main()
