"""The what-if planner's error on this machine: predict a 4-actor PPO CartPole run from 1- and 2-actor runs.

Runs ``configs/ppo-cartpole.yaml`` (fixed scaling, ``--rounds`` rounds, minibatch 128 so one actor's round
fits) with 1, 2 and 4 actors; profiles the 1- and 2-actor runs (``cost/planner.py``), simulates the
4-actor run with this machine's CPU count as the actor slots, and reports the predicted and measured
mean round time, wall time (sum of round times) and serverless cost, with the relative errors.

Run:   python benchmarks/planner_validation.py   (~3 min on 2 quiet cores; results/planner_validation.json)
Smoke: python benchmarks/planner_validation.py --rounds 3 --out /tmp/planner.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import record, write_result
from nimbus.config import apply_overrides, load_config, parse_config
from nimbus.cost.planner import profile_runs, simulate
from nimbus.cost.pricing import load_pricing
from nimbus.run.loop import train

ROOT = Path(__file__).resolve().parent.parent


def run(*, actors: int, rounds: int, root: Path) -> Path:
    base = load_config(path=ROOT / "configs" / "ppo-cartpole.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(root), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    config = parse_config(data=apply_overrides(data=base, overrides=[
        f"actors.scaling.num_actors={actors}", f"train.max_rounds={rounds}", "algo.minibatch_size=128"]))
    return train(config=config, run_dir=root / f"actors{actors}").run_dir


def measured(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((run_dir / "summary.json").read_text())
    round_s = [row["round_s"] for row in rows]
    return {"round_s_mean": statistics.mean(round_s), "wall_s": sum(round_s),
            "serverless_usd": summary["serverless_cost_usd"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "planner_validation.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nimbus-planner-") as tmp:
        runs = {n: run(actors=n, rounds=args.rounds, root=Path(tmp)) for n in (1, 2, 4)}
        profile = profile_runs(run_dirs=[runs[1], runs[2]])
        plan = simulate(profile=profile, actors=4, learners=1, rounds=args.rounds, pricing=load_pricing(),
                        capacity_cpus=float(os.cpu_count() or 1))
        truth = measured(runs[4])
    predicted = {"round_s_mean": plan.round_s_mean, "wall_s": plan.wall_s, "serverless_usd": plan.serverless_usd}
    errors = {k: (predicted[k] - truth[k]) / truth[k] for k in truth}
    print(f"{'4 actors':16s} {'predicted':>11s} {'measured':>11s} {'error':>8s}")
    for key in truth:
        print(f"{key:16s} {predicted[key]:11.4f} {truth[key]:11.4f} {errors[key]:+8.1%}")
    result = {**record(benchmark="planner_validation"),
              "rounds": args.rounds, "predicted": predicted, "measured": truth, "relative_error": errors,
              "serverful_usd_predicted": plan.serverful_usd}
    print(f"wrote {write_result(path=args.out, result=result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
