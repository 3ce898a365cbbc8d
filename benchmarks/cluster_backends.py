"""Local vs Ray backend on this machine: PPO CartPole time to 475 and per-round framework overhead.

The same config on both backends — configs/ppo-cartpole.yaml (2 actor functions × 4 envs × 32 steps,
20 epochs of one 256-row minibatch) with ``actors.function.cpus=0.5`` and ``learner.function.cpus=1``
so that the three warm workers fit Ray's 2 logical CPUs here (the local backend schedules them the
same way), ``train.target_return=475`` over ``train.return_window=100`` episodes (CartPole-v1's
"solved"), ``train.total_env_steps`` capped at 300k. Only ``runtime.backend`` differs. Each run is a
fresh subprocess; backends are interleaved run by run (seed by seed) so load changes on the shared
machine hit both alike.

Per run:

* **time to 475**: ``summary.wall_s`` (first round -> target reached, prewarm included); for Ray also
  the Ray start-up (``ray.init``) the run paid before that, and both added;
* **per-round overhead**: the rows' ``overhead_s`` (round time minus the slowest actor's env+inference
  and the learner's gradient compute), median over rounds after ``--warmup``; and the *cycle*
  overhead (time between round ends minus that work: the driver's work between rounds counts too).

Goal (issue 4): Ray's per-round overhead ≤ 1.5× local's.

Run:  python benchmarks/cluster_backends.py [--repeats 3]   (writes benchmarks/results/cluster_backends.json)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from _common import child_line, child_result, record, stats, write_result

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("local", "ray")
OVERRIDES = ["actors.function.cpus=0.5", "learner.function.cpus=1", "train.target_return=475",
             "train.return_window=100", "train.total_env_steps=300000", "train.eval_episodes=0", "output.report=false"]


def run_child(*, backend: str, seed: int, out_dir: Path) -> dict:
    from nimbus.config import load_config
    from nimbus.run.loop import train

    ray_start_s = 0.0
    if backend == "ray":
        from nimbus.runtime.ray_cluster import connect_ray

        ray_start_s = connect_ray(address="local", num_cpus=os.cpu_count()).seconds  # the runtime reuses it
    config = load_config(path=REPO / "configs" / "ppo-cartpole.yaml", overrides=[
        f"seed={seed}", f"runtime.backend={backend}", f"output.root_dir={out_dir}", *OVERRIDES])
    result = train(config=config)
    rows = [{"round": r.round, "round_s": r.round_s, "wall_s": r.wall_s, **{k: r.extras[k] for k in (
        "overhead_s", "overhead_share", "actor_work_s", "compute_s")}} for r in result.rows]
    return {"backend": backend, "seed": seed, "ray_start_s": ray_start_s, "wall_s": result.summary.wall_s,
            "stopped_by": result.summary.stopped_by, "env_steps": result.summary.env_steps,
            "rounds": result.summary.rounds, "final_return": result.summary.final_return, "rows": rows}


def overhead(*, rows: list[dict], warmup: int) -> dict:
    kept = [(prev, row) for prev, row in zip(rows, rows[1:]) if row["round"] >= warmup]
    cycle = np.array([row["wall_s"] - prev["wall_s"] for prev, row in kept])
    work = np.array([row["actor_work_s"] + row["compute_s"] for _, row in kept])
    return {"in_round_overhead_ms": 1e3 * float(np.median([row["overhead_s"] for _, row in kept])),
            "in_round_share": float(np.median([row["overhead_share"] for _, row in kept])),
            "cycle_overhead_ms": 1e3 * float(np.median(np.maximum(0.0, cycle - work))),
            "round_ms": 1e3 * float(np.median([row["round_s"] for _, row in kept]))}


def spawn(*, backend: str, seed: int, timeout_s: float) -> dict:
    cmd = [sys.executable, __file__, "--child", backend, "--seed", str(seed)]
    return child_result(cmd=cmd, cwd=REPO, timeout_s=timeout_s, what=f"{backend} seed {seed}")


def summarise(*, runs: list[dict]) -> dict:
    keys = ("wall_s", "ray_start_s", "in_round_overhead_ms", "cycle_overhead_ms", "round_ms", "in_round_share")
    out = {b: {k: stats([r[k] for r in runs if r["backend"] == b]) for k in keys} for b in BACKENDS}
    pairs = [(a, b) for a in runs for b in runs if a["seed"] == b["seed"] and (a["backend"], b["backend"]) == BACKENDS]
    out["ray_over_local"] = {k: stats([b[k] / a[k] for a, b in pairs]) for k in (
        "in_round_overhead_ms", "cycle_overhead_ms", "wall_s")}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5, help="rounds dropped at the start of each run")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "cluster_backends.json")
    parser.add_argument("--child", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory(prefix="nimbus-backends-") as tmp:
            print(child_line(run_child(backend=args.child, seed=args.seed, out_dir=Path(tmp))), flush=True)
        return 0
    runs = []
    for seed in range(args.repeats):
        for backend in BACKENDS:
            load = os.getloadavg()[0]
            run = spawn(backend=backend, seed=seed, timeout_s=args.timeout_s)
            run.update(overhead(rows=run.pop("rows"), warmup=args.warmup), load_1m=load)
            runs.append(run)
            print(f"{backend:5s} seed {seed}: {run['stopped_by']} after {run['env_steps']} steps, "
                  f"{run['wall_s']:.1f} s (+ Ray start {run['ray_start_s']:.1f} s); overhead/round "
                  f"{run['in_round_overhead_ms']:.1f} ms in-round, {run['cycle_overhead_ms']:.1f} ms cycle, round "
                  f"{run['round_ms']:.1f} ms; load {load:.1f}", flush=True)
    summary = summarise(runs=runs)
    ratio = summary["ray_over_local"]["in_round_overhead_ms"]["median"]
    print(f"ray/local per-round overhead: x{ratio:.2f} in-round, "
          f"x{summary['ray_over_local']['cycle_overhead_ms']['median']:.2f} cycle (goal <= 1.5)")
    result = {**record(benchmark="cluster_backends"), "overrides": OVERRIDES,
              "warmup_rounds": args.warmup, "runs": runs, "summary": summary, "goal_ratio": 1.5}
    print(f"wrote {write_result(path=args.out, result=result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
