"""The resident parameter function before/after (issue 26 Build): its share of WALL time and the staleness histogram.

The ``stellaris`` arm of benchmarks/stellaris_ablation.py (configs/stellaris-cartpole.yaml: PPO on CartPole-v1,
4 learners, slot 0 a straggler at ``--straggler-factor``, rule stellaris, truncation paper), run with
``stellaris.resident_parameter`` false (before: every aggregation publishes weights and Adam state, a cold worker
loads them) and true (after: the state stays in the worker, only weights are published), the same seeds and rounds,
on the local (forked workers) backend. Per run:

* the parameter function's share of wall time, twice: Σ of its in-function seconds (``staleness/parameter_s``, as
  the ablation reports it) / the run's wall seconds, and Σ of its ledger ``duration_s`` (the invocation as the
  runtime saw it, checkpoint exports included) / wall seconds;
* seconds per aggregation (in-function), aggregations, gradients per aggregation, and the members it recomputed
  (truncation by co-members of other versions: a gradient computed again inside the parameter function, its
  costliest work, which depends on how the rule's queue mixes versions in that run, not on residency;
  ``--rule async`` has one gradient per aggregation and none, and isolates what residency saves);
* the staleness histogram (``staleness/count_*`` summed over the run) and its mean.

Per arm: the mean and the range over the seeds. No evaluation (this measures the system, not learning).

Run:  python benchmarks/stellaris_parameter.py                    (2 arms × 5 seeds × 60 rounds; alone about 3
                                                                    min on 2 cores; writes
                                                                    benchmarks/results/stellaris_parameter.json)
      python benchmarks/stellaris_parameter.py --smoke            (1 seed, 3 rounds)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from nimbus.config import load_config
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "stellaris-cartpole.yaml"
ARMS = {"resident_off": ["stellaris.resident_parameter=false"], "resident_on": ["stellaris.resident_parameter=true"]}
log = logging.getLogger("stellaris_parameter")


@dataclass(frozen=True)
class Run:
    arm: str
    seed: int
    wall_s: float
    parameter_share_in_function: float   # Σ staleness/parameter_s / wall_s
    parameter_share_ledger: float        # Σ ledger duration_s of the parameter function / wall_s
    parameter_s_per_aggregation: float
    aggregations: int
    recomputed: int                      # members the parameter function recomputed (mixed versions): costliest work
    gradients_per_aggregation: float
    staleness_mean: float                # over the gradients the rule saw (weighted by each round's count)
    staleness_counts: dict[str, float] = field(default_factory=dict)


def run_arm(*, arm: str, seed: int, rounds: int, root: Path, straggler_factor: float, rule: str) -> Run:
    overrides = [f"seed={seed}", f"train.max_rounds={rounds}", "train.total_env_steps=10000000",
                 "train.target_return=null", "stellaris.learners=4", f"stellaris.rule={rule}",
                 "stellaris.truncation=paper", f"stellaris.stragglers={{learners: [0], factor: {straggler_factor}}}",
                 f"output.root_dir={root}", "output.status_line=false", "output.loggers=[]", "output.report=false",
                 "train.eval_episodes=0", *ARMS[arm]]
    result = train(config=load_config(path=CONFIG, overrides=overrides), run_dir=root / f"{arm}-s{seed}")
    rows, wall_s = result.rows, max(result.summary.wall_s, 1e-9)
    ledger = [json.loads(line) for line in (result.run_dir / "ledger.jsonl").read_text().splitlines()]
    parameter_s = sum(r.extras["staleness/parameter_s"] for r in rows)
    aggregations = int(sum(r.extras["staleness/aggregations"] for r in rows))
    counts: Counter = Counter()
    for row in rows:
        counts.update({k: v for k, v in row.extras.items() if k.startswith("staleness/count_")})
    seen = [(row.extras["staleness/mean"], row.extras["staleness/admitted"] + row.extras["staleness/rejected"])
            for row in rows if row.extras["staleness/mean"] == row.extras["staleness/mean"]]
    return Run(arm=arm, seed=seed, wall_s=result.summary.wall_s, parameter_share_in_function=parameter_s / wall_s,
               parameter_share_ledger=sum(r["duration_s"] for r in ledger
                                          if r["function"] == "parameter" and r["outcome"] == "ok") / wall_s,
               parameter_s_per_aggregation=parameter_s / max(aggregations, 1), aggregations=aggregations,
               recomputed=int(sum(r.extras["staleness/recomputed"] for r in rows)),
               gradients_per_aggregation=float(np.mean([r.extras["staleness/gradients_per_aggregation"]
                                                        for r in rows])),
               staleness_mean=float(sum(m * n for m, n in seen) / max(sum(n for _, n in seen), 1)),
               staleness_counts=dict(sorted(counts.items())))


def summary(*, runs: list[Run]) -> dict[str, dict]:
    out = {}
    for arm in ARMS:
        mine = [r for r in runs if r.arm == arm]
        if not mine:
            continue
        counts: Counter = Counter()
        for run in mine:
            counts.update(run.staleness_counts)
        out[arm] = {key: {"mean": float(np.mean([getattr(r, key) for r in mine])),
                          "min": float(min(getattr(r, key) for r in mine)),
                          "max": float(max(getattr(r, key) for r in mine))}
                    for key in ("wall_s", "parameter_share_in_function", "parameter_share_ledger",
                                "parameter_s_per_aggregation", "aggregations", "recomputed",
                                "gradients_per_aggregation", "staleness_mean")}
        out[arm]["staleness_counts"] = dict(sorted(counts.items()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--straggler-factor", type=float, default=4.0)
    parser.add_argument("--rule", default="stellaris", help="async: one gradient per aggregation, no recomputation "
                                                             "(isolates what residency saves)")
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "stellaris-parameter")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "stellaris_parameter.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    seeds, rounds = ([0], 3) if args.smoke else (args.seeds, args.rounds)
    load_before = os.getloadavg()[0]
    runs = []
    for seed in seeds:
        for arm in ARMS:   # alternating arms per seed: a change of load hits both
            run = run_arm(arm=arm, seed=seed, rounds=rounds, root=args.root, straggler_factor=args.straggler_factor,
                          rule=args.rule)
            log.info("%s seed %d: wall %.1f s, parameter %.1f %% of wall (ledger %.1f %%), %.4f s per aggregation, "
                     "staleness mean %.2f, %d recomputed", arm, seed, run.wall_s, 100 * run.parameter_share_in_function,
                     100 * run.parameter_share_ledger, run.parameter_s_per_aggregation, run.staleness_mean,
                     run.recomputed)
            runs.append(run)
    result = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                          "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0]},
              "settings": {"seeds": seeds, "rounds": rounds, "straggler_factor": args.straggler_factor,
                           "rule": args.rule},
              "summary": summary(runs=runs), "runs": [asdict(r) for r in runs]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    for arm, entry in result["summary"].items():
        log.info("%s: parameter share of wall %.1f %% (ledger %.1f %%), staleness %s", arm,
                 100 * entry["parameter_share_in_function"]["mean"], 100 * entry["parameter_share_ledger"]["mean"],
                 entry["staleness_counts"])
    log.info("wrote %s", args.output)


if __name__ == "__main__":
    main()
