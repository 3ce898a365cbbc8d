"""Framework overhead per round: everything but env stepping, policy inference and gradient computation.

From each run's metrics rows (onpolicy workflow, local backend, 2 actor functions):

* **in-round** (the rows' own ``overhead_share``): ``round_s`` (actors dispatched -> learner result
  handled) minus ``actor_work_s`` (the slowest actor's env stepping + inference) minus ``compute_s``
  (the learner's postprocess + gradient steps), over ``round_s``.
* **cycle** (stricter): the same, but over the time between two consecutive round ends (difference of
  the rows' ``wall_s``), so the driver's work *between* rounds (metrics, TensorBoard, status line,
  checkpoints, controllers, version clean-up) counts as overhead too.

Per run: median and p90 over rounds (the first ``--warmup`` rounds dropped: first-touch imports,
env creation). Across ``--repeats`` runs: min / median / max of those. Goal: median < 3 %.

Cases: ``cartpole`` (configs/ppo-cartpole.yaml: 2 actors x 4 envs x 32 steps, 20 epochs of 1 minibatch
of 256), ``cartpole-f128`` (fragment_steps 128: 1024 rows, 80 gradient steps), ``hopper`` (Hopper-v5,
fragment_steps 128, PPO defaults: 10 epochs x 16 minibatches of 64). TensorBoard and the status line
stay on, as shipped; no report, no evaluation.

``--variant NAME=SRC_DIR`` (repeatable) runs nimbus from another source tree (e.g. a copy of the tree
before a change), interleaved with the others run by run, for a side-by-side before/after.

Run:  python benchmarks/framework_overhead.py [--repeats 3] [--cases cartpole,cartpole-f128,hopper]
      (writes benchmarks/results/framework_overhead.json)
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
CASES: dict[str, dict] = {
    "cartpole": {"rounds": 150, "overrides": []},
    "cartpole-f128": {"rounds": 60, "overrides": ["actors.fragment_steps=128"]},
    "hopper": {"rounds": 30, "overrides": [
        "env.id=Hopper-v5", "actors.fragment_steps=128", "algo.gamma=0.99", "algo.gae_lambda=0.95",
        "algo.lr=0.0003", "algo.lr_schedule=constant", "algo.clip_schedule=constant", "algo.num_epochs=10",
        "algo.minibatch_size=64"]},
}


def run_case(*, case: str, seed: int, out_dir: Path) -> list[dict]:
    from nimbus.config import load_config
    from nimbus.run.loop import train

    spec = CASES[case]
    config = load_config(path=REPO / "configs" / "ppo-cartpole.yaml", overrides=[
        f"seed={seed}", f"train.max_rounds={spec['rounds']}", "train.total_env_steps=100000000",
        "train.eval_episodes=0", "output.report=false", f"output.root_dir={out_dir}", *spec["overrides"]])
    result = train(config=config)
    return [{"round": r.round, "round_s": r.round_s, "wall_s": r.wall_s, **{k: r.extras[k] for k in (
        "overhead_s", "overhead_share", "actor_work_s", "compute_s")}} for r in result.rows]


def per_run(*, rows: list[dict], warmup: int) -> dict:
    """Median / p90 of the in-round and cycle overhead over the rounds after ``warmup``."""
    kept = [(prev, row) for prev, row in zip(rows, rows[1:]) if row["round"] >= warmup]
    cycle = np.array([row["wall_s"] - prev["wall_s"] for prev, row in kept])
    work = np.array([row["actor_work_s"] + row["compute_s"] for _, row in kept])
    cycle_overhead = np.maximum(0.0, cycle - work)
    in_round = np.array([row["overhead_share"] for _, row in kept])
    in_round_s = np.array([row["overhead_s"] for _, row in kept])
    round_s = np.array([row["round_s"] for _, row in kept])

    def q(a: np.ndarray, p: float) -> float:
        return float(np.percentile(a, p))

    return {"rounds": len(kept), "in_round_share_median": q(in_round, 50), "in_round_share_p90": q(in_round, 90),
            "in_round_overhead_ms_median": 1e3 * q(in_round_s, 50), "round_ms_median": 1e3 * q(round_s, 50),
            "cycle_share_median": q(cycle_overhead / cycle, 50), "cycle_share_p90": q(cycle_overhead / cycle, 90),
            "cycle_overhead_ms_median": 1e3 * q(cycle_overhead, 50), "cycle_ms_median": 1e3 * q(cycle, 50)}


def spawn(*, case: str, seed: int, src: Path | None, timeout_s: float) -> list[dict]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = f"{src}{os.pathsep}{env.get('PYTHONPATH', '')}"
    cmd = [sys.executable, __file__, "--child", case, "--seed", str(seed)]
    return child_result(cmd=cmd, env=env, cwd=REPO, timeout_s=timeout_s, what=f"{case} seed {seed}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--warmup", type=int, default=5, help="rounds dropped at the start of each run")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=SRC_DIR",
                        help="run nimbus from SRC_DIR under NAME (repeatable); default: the installed tree")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "framework_overhead.json")
    parser.add_argument("--child", choices=tuple(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory(prefix="nimbus-overhead-") as tmp:
            rows = run_case(case=args.child, seed=args.seed, out_dir=Path(tmp))
        print(child_line(rows), flush=True)
        return 0

    variants = [(v.split("=", 1)[0], Path(v.split("=", 1)[1])) for v in args.variant] or [("installed", None)]
    cases = [c for c in args.cases.split(",") if c]
    runs: list[dict] = []
    for repeat in range(args.repeats):  # interleaved: every case and variant once per repeat
        for case in cases:
            for name, src in variants:
                rows = spawn(case=case, seed=repeat, src=src, timeout_s=args.timeout_s)
                run = {"variant": name, "case": case, "seed": repeat, **per_run(rows=rows, warmup=args.warmup)}
                runs.append(run)
                print(f"{name:10s} {case:14s} seed {repeat}: in-round {100 * run['in_round_share_median']:5.1f} % "
                      f"({run['in_round_overhead_ms_median']:.2f} ms of {run['round_ms_median']:.1f}), cycle "
                      f"{100 * run['cycle_share_median']:5.1f} % ({run['cycle_overhead_ms_median']:.2f} ms of "
                      f"{run['cycle_ms_median']:.1f})", flush=True)

    metrics = ("in_round_share_median", "in_round_share_p90", "cycle_share_median", "cycle_share_p90",
               "in_round_overhead_ms_median", "cycle_overhead_ms_median", "round_ms_median", "cycle_ms_median")
    summary: dict = {}
    print(f"\n{'variant':10s} {'case':14s} {'metric':28s} {'min':>8s} {'median':>8s} {'max':>8s}")
    for name, _ in variants:
        for case in cases:
            mine = [r for r in runs if r["variant"] == name and r["case"] == case]
            summary.setdefault(name, {})[case] = {m: stats([r[m] for r in mine]) for m in metrics}
            for m in metrics:
                s = summary[name][case][m]
                scale, unit = (100, "%") if "share" in m else (1, "ms")
                print(f"{name:10s} {case:14s} {m + ' (' + unit + ')':28s} {scale * s['min']:8.2f} "
                      f"{scale * s['median']:8.2f} {scale * s['max']:8.2f}")
    ratios: dict = {}
    if len(variants) >= 2:
        base, other = variants[0][0], variants[-1][0]
        for case in cases:
            pairs = [(a, b) for a in runs for b in runs if a["case"] == b["case"] == case and a["seed"] == b["seed"]
                     and a["variant"] == base and b["variant"] == other]
            ratios[case] = {m: stats([b[m] / a[m] for a, b in pairs]) for m in (
                "in_round_overhead_ms_median", "cycle_overhead_ms_median", "cycle_ms_median")}
            r = ratios[case]
            print(f"{other}/{base} {case:14s} in-round overhead x{r['in_round_overhead_ms_median']['median']:.2f} "
                  f"(min {r['in_round_overhead_ms_median']['min']:.2f}, "
                  f"max {r['in_round_overhead_ms_median']['max']:.2f}),"
                  f" cycle overhead x{r['cycle_overhead_ms_median']['median']:.2f} "
                  f"(min {r['cycle_overhead_ms_median']['min']:.2f}, max {r['cycle_overhead_ms_median']['max']:.2f}),"
                  f" cycle time x{r['cycle_ms_median']['median']:.2f}")
    result = {**record(benchmark="framework_overhead"),
              "variants": {name: str(src) if src else "installed" for name, src in variants}, "cases": CASES,
              "warmup_rounds": args.warmup, "runs": runs, "summary": summary, "ratios": ratios, "goal_share": 0.03}
    print(f"wrote {write_result(path=args.out, result=result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
