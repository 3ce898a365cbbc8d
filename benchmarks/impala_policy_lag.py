"""Policy-lag distribution of IMPALA on the ``offpolicy`` workflow with 2 and 4 actors.

Policy lag of a consumed row = the learner's policy_version when it takes the batch − the version
the actor collected the row with (the ``offpolicy`` workflow records it for every row of every batch:
``policy_lag.json`` in the run directory, and ``policy_lag_mean`` / ``policy_lag_max`` per metrics row).

Setting: configs/impala-cartpole.yaml as shipped (XingTian's IMPALA pattern: FIFO batches of one
actor fragment, the new version goes only to the actor it heard from) with N actors, capped at
``--steps`` env steps, no early stop, ``runtime.max_workers`` = N + 1. Back-pressure scales with N:
``max_steps_ahead`` = (N + 1) fragments (``--ahead none``: actors never wait, the backlog and the lag
then grow with the run whenever actors outpace the learner). Runs are subprocesses.

Run:  python benchmarks/impala_policy_lag.py [--actors 2 4] [--steps 40000] [--ahead scaled|none]
      (writes benchmarks/results/impala_policy_lag.json and prints the table)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from _common import child_line, child_result, record, versions, write_result

REPO = Path(__file__).resolve().parents[1]


def run_once(*, actors: int, steps: int, ahead: str, seed: int, out_dir: Path) -> dict:
    from nimbus.config import load_config
    from nimbus.run.loop import train

    base = load_config(path=REPO / "configs" / "impala-cartpole.yaml")
    fragment_rows = base.env.num_envs_per_actor * base.actors.fragment_steps
    ahead_value = "null" if ahead == "none" else str((actors + 1) * fragment_rows)
    config = load_config(path=REPO / "configs" / "impala-cartpole.yaml", overrides=[
        f"seed={seed}", f"actors.scaling.num_actors={actors}", f"runtime.max_workers={actors + 1}",
        f"train.total_env_steps={steps}", "train.target_return=null", "train.eval_episodes=0",
        f"offpolicy.max_steps_ahead={ahead_value}", "output.report=false", "output.status_line=false",
        "output.loggers=[]", f"output.root_dir={out_dir}"])
    result = train(config=config)
    lag_file = json.loads((result.run_dir / "policy_lag.json").read_text())
    hist = {int(k): v for k, v in lag_file["policy_lag_rows"].items()}
    lags = np.repeat(np.array(list(hist), dtype=np.int64), list(hist.values()))
    batch_means = [r.extras["policy_lag_mean"] for r in result.rows]
    return {"actors": actors, "ahead": ahead, "seed": seed, "env_steps": result.summary.env_steps,
            "updates": result.summary.rounds, "final_return": result.summary.final_return,
            "lag_histogram_rows": hist, "lag_mean": float(lags.mean()),
            "lag_percentiles": {f"p{p}": float(np.percentile(lags, p)) for p in (50, 90, 99)},
            "lag_max": int(lags.max()),
            "batch_lag_mean_percentiles": {f"p{p}": float(np.percentile(batch_means, p)) for p in (50, 90, 99)},
            "lost_fragments": lag_file["lost_fragments"], "wall_s": result.summary.wall_s}


def spawn(*, actors: int, steps: int, ahead: str, seed: int, timeout_s: float) -> dict:
    cmd = [sys.executable, __file__, "--child", str(actors), "--child-steps", str(steps), "--ahead", ahead,
           "--seed", str(seed)]
    return child_result(cmd=cmd, cwd=REPO, timeout_s=timeout_s, what=f"{actors} actors")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--ahead", choices=("scaled", "none"), default="scaled")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "impala_policy_lag.json")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child-steps", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory(prefix="nimbus-bench-") as tmp:
            result = run_once(actors=args.child, steps=args.child_steps, ahead=args.ahead, seed=args.seed,
                              out_dir=Path(tmp))
        print(child_line(result), flush=True)
        return 0
    runs = [spawn(actors=n, steps=args.steps, ahead=args.ahead, seed=args.seed, timeout_s=args.timeout_s)
            for n in args.actors]
    print(f"{'actors':>6s} {'updates':>7s} {'mean':>6s} {'p50':>5s} {'p90':>5s} {'p99':>5s} {'max':>5s}  "
          f"histogram (lag: share of rows)")
    for run in runs:
        counts = {int(k): v for k, v in run["lag_histogram_rows"].items()}
        total = sum(counts.values())
        hist = ", ".join(f"{k}: {v / total:.2f}" for k, v in sorted(counts.items()) if v / total >= 0.01)
        p = run["lag_percentiles"]
        print(f"{run['actors']:6d} {run['updates']:7d} {run['lag_mean']:6.2f} {p['p50']:5.0f} {p['p90']:5.0f} "
              f"{p['p99']:5.0f} {run['lag_max']:5d}  {hist}")
    result = {**record(benchmark="impala_policy_lag"), "versions": versions(modules=()), "runs": runs}
    print(f"wrote {write_result(path=args.out, result=result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
