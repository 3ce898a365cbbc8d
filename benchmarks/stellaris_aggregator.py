"""Does the parameter function keep up? Its share of wall, the learners computing, and the staleness, before/after.

Two settings (``--setting``), each run with ``stellaris.gather_arrivals`` on (``gather``: a learner slot frees when
its gradient lands; the gradients that landed during an aggregation join the queue together) and off (``hold``: the
slot is held until the rule takes its gradient, one decision per gradient: the default), same seeds:

* ``shipped``: configs/stellaris-cartpole.yaml as shipped (3 learners, rule stellaris, truncation paper, resident
  parameter function) on the local backend (forked workers: real time, the CPU this machine has);
* ``paper16``: the paper's learner count on the simulated backend: 16 learners, ``--actors`` × 4 envs × 64 steps a
  round, rule stellaris at d 0.96, durations drawn from ``--profile`` (a profile fitted on a real run, the one
  benchmarks/stellaris_paper_scale.py uses), no pre-warming.

Per run, from the ledger (every attempt's duration, on the run's clock: real or simulated) and the metrics rows:

* ``parameter_share``: Σ parameter-function durations / wall (the paper's overhead claim: < 5 %; on the simulated
  backend this is the parameter function's busy fraction, since one runs at a time), and ``parameter_first_s``, its
  first call, which it includes: a cold worker's first optimizer imports torch._dynamo (torch's Optimizer.__init__
  does), seconds where Python may not write bytecode caches (PYTHONDONTWRITEBYTECODE);
* ``learners_computing``: Σ gradient-learner durations / wall, the mean number of learners computing at once;
* ``gradients_per_aggregation``, ``aggregations``, ``recomputed`` (members the parameter function recomputed);
* the staleness histogram (``staleness/count_*`` summed) and mean, over all rounds and over the steady rounds
  (round ≥ 2: round 0 is the cold start, round 1 measures δmax).

Run:  python benchmarks/stellaris_aggregator.py --setting shipped --rounds 60 --seeds 0 1 2
      python benchmarks/stellaris_aggregator.py --setting paper16 --rounds 15 --seeds 0 1 2 \
          --profile benchmarks/results/stellaris_paper_scale_profile.yaml
      python benchmarks/stellaris_aggregator.py --setting shipped --smoke     (1 seed, 3 rounds)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from nimbus.config import load_config
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "stellaris-cartpole.yaml"
ARMS = {"gather": ["stellaris.gather_arrivals=true"], "hold": ["stellaris.gather_arrivals=false"]}
STEADY_FROM_ROUND = 2
log = logging.getLogger("stellaris_aggregator")


@dataclass(frozen=True)
class Run:
    setting: str
    arm: str
    seed: int
    wall_s: float                 # the run's clock (simulated seconds on the simulated backend)
    real_s: float                 # this process's seconds for the run
    parameter_share: float        # Σ parameter durations / wall
    parameter_first_s: float      # its first call (a cold worker: imports, the first optimizer), inside the share
    learners_computing: float     # Σ gradient-learner durations / wall
    aggregations: int
    gradients_per_aggregation: float
    recomputed: int
    staleness_mean: float
    staleness_mean_steady: float
    staleness_counts: dict[str, float] = field(default_factory=dict)
    staleness_counts_steady: dict[str, float] = field(default_factory=dict)


def setting_overrides(*, setting: str, actors: int, profile: Path | None) -> list[str]:
    if setting == "shipped":
        return []
    if profile is None:
        raise SystemExit("--setting paper16 needs --profile (a simulation profile fitted on a real run)")
    return ["runtime.backend=simulated", f"simulation.profile={profile}", "stellaris.learners=16",
            f"actors.scaling.num_actors={actors}", "stellaris.decay=0.96", "runtime.prewarm=false"]


def run_one(*, setting: str, arm: str, seed: int, rounds: int, root: Path, actors: int, profile: Path | None) -> Run:
    overrides = [f"seed={seed}", f"train.max_rounds={rounds}", "train.total_env_steps=10000000",
                 "train.target_return=null", f"output.root_dir={root}", "output.status_line=false",
                 "output.loggers=[]", "output.report=false", "train.eval_episodes=0",
                 *setting_overrides(setting=setting, actors=actors, profile=profile), *ARMS[arm]]
    started = time.perf_counter()
    result = train(config=load_config(path=CONFIG, overrides=overrides), run_dir=root / f"{setting}-{arm}-s{seed}")
    return measured(setting=setting, arm=arm, seed=seed, run_dir=result.run_dir, wall_s=result.summary.wall_s,
                    real_s=time.perf_counter() - started)


def measured(*, setting: str, arm: str, seed: int, run_dir: Path, wall_s: float, real_s: float) -> Run:
    """The figures of a finished run directory (module docstring)."""
    wall_s = max(wall_s, 1e-9)
    ledger = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines() if line.strip()]
    busy = Counter()
    for record in ledger:
        busy[record["function"]] += record["duration_s"]
    parameter_calls = sorted((r for r in ledger if r["function"] == "parameter"), key=lambda r: r["start_at"])
    rows = [row["extras"] for row in read_metrics(path=run_dir / "metrics.jsonl")]
    steady = [row for index, row in enumerate(rows) if index >= STEADY_FROM_ROUND]
    return Run(setting=setting, arm=arm, seed=seed, wall_s=wall_s, real_s=real_s,
               parameter_share=busy["parameter"] / wall_s, learners_computing=busy["gradient_learner"] / wall_s,
               parameter_first_s=parameter_calls[0]["duration_s"] if parameter_calls else 0.0,
               aggregations=int(sum(row["staleness/aggregations"] for row in rows)),
               gradients_per_aggregation=float(np.mean([row["staleness/gradients_per_aggregation"] for row in rows])),
               recomputed=int(sum(row["staleness/recomputed"] for row in rows)),
               staleness_mean=_mean_staleness(rows), staleness_mean_steady=_mean_staleness(steady),
               staleness_counts=_counts(rows), staleness_counts_steady=_counts(steady))


def _counts(rows: list[dict]) -> dict[str, float]:
    counts: Counter = Counter()
    for row in rows:
        counts.update({key: value for key, value in row.items() if key.startswith("staleness/count_")})
    return dict(sorted(counts.items(), key=lambda item: (item[0].endswith("plus"), len(item[0]), item[0])))


def _mean_staleness(rows: list[dict]) -> float:
    seen = [(row["staleness/mean"], row["staleness/admitted"] + row["staleness/rejected"]) for row in rows
            if row["staleness/mean"] == row["staleness/mean"]]
    total = sum(n for _, n in seen)
    return float(sum(m * n for m, n in seen) / total) if total else float("nan")


def summary(*, runs: list[Run]) -> dict[str, dict]:
    out = {}
    for arm in ARMS:
        mine = [run for run in runs if run.arm == arm]
        if not mine:
            continue
        out[arm] = {key: {"mean": float(np.mean([getattr(r, key) for r in mine])),
                          "min": float(min(getattr(r, key) for r in mine)),
                          "max": float(max(getattr(r, key) for r in mine))}
                    for key in ("wall_s", "real_s", "parameter_share", "parameter_first_s", "learners_computing",
                                "aggregations",
                                "gradients_per_aggregation", "recomputed", "staleness_mean", "staleness_mean_steady")}
        for key in ("staleness_counts", "staleness_counts_steady"):
            total: Counter = Counter()
            for run in mine:
                total.update(getattr(run, key))
            out[arm][key] = _counts([dict(total)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", choices=("shipped", "paper16"), required=True)
    parser.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--actors", type=int, default=8, help="paper16: actors a round (8: 2048 rows)")
    parser.add_argument("--profile", type=Path, default=None, help="paper16: the simulation profile")
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "stellaris-aggregator")
    parser.add_argument("--smoke", action="store_true", help="1 seed, 3 rounds")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    seeds, rounds = ([0], 3) if args.smoke else (args.seeds, args.rounds)
    output = args.output or REPO / "benchmarks" / "results" / f"stellaris_aggregator_{args.setting}.json"
    load_before = os.getloadavg()[0]
    if not args.smoke:   # one-time costs of the process (imports, the first workers) fall on a discarded run
        run_one(setting=args.setting, arm=args.arms[0], seed=seeds[0], rounds=2, root=args.root / "warmup",
                actors=args.actors, profile=args.profile)
    runs = []
    for seed in seeds:
        for arm in args.arms:   # alternating arms per seed: a change of load hits both
            run = run_one(setting=args.setting, arm=arm, seed=seed, rounds=rounds, root=args.root, actors=args.actors,
                          profile=args.profile)
            log.info("%s %s seed %d: wall %.2f s, parameter %.1f %% of wall, %.2f learners computing, %.2f gradients "
                     "per aggregation, staleness mean %.2f (steady %.2f)", args.setting, arm, seed, run.wall_s,
                     100 * run.parameter_share, run.learners_computing, run.gradients_per_aggregation,
                     run.staleness_mean, run.staleness_mean_steady)
            runs.append(run)
    result = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                          "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0]},
              "settings": {"setting": args.setting, "seeds": seeds, "rounds": rounds, "actors": args.actors,
                           "profile": str(args.profile) if args.profile else None},
              "summary": summary(runs=runs), "runs": [asdict(r) for r in runs]}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    for arm, entry in result["summary"].items():
        log.info("%s: parameter %.1f %% of wall, %.2f learners computing, steady staleness %s", arm,
                 100 * entry["parameter_share"]["mean"], entry["learners_computing"]["mean"],
                 entry["staleness_counts_steady"])
    log.info("wrote %s", output)


if __name__ == "__main__":
    main()
