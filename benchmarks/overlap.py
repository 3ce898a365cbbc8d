"""train.overlap on and off, at equal env steps: PPO CartPole's return (IQM across seeds, 95 % bootstrap) and wall time.

Setting: configs/ppo-cartpole.yaml as shipped (local backend, 2 actors x 4 envs x 32 steps, rl-zoo's tuned PPO),
no early stop (``train.target_return=null``), ``--steps`` env steps per run, no final evaluation. The two arms
differ only in ``train.overlap``. Each run is its own subprocess; arms are interleaved per seed (off seed 0, on seed
0, off seed 1, ...) so both see the same machine load.

Scores at equal env steps: at each of ``--points`` fractions of ``--steps`` the mean return of the last 100 episodes
(``recent_return_mean`` of the first round at or past that many env steps) and the wall seconds until then. Reported
per arm: IQM with a 95 % stratified bootstrap interval (nimbus.analysis.stats, rliable's definitions), each seed's
value, and the probability that overlap's return is higher (P(on > off)).

Run:  python benchmarks/overlap.py [--seeds 5] [--steps 100000] [--points 0.25 0.5 0.75 1.0]
      (writes benchmarks/results/overlap.json and prints the table; ~10 runs x ~20 s on 2 idle cores)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from _common import RunUsage, child_line, child_result, interval_cell, record, versions, write_result

REPO = Path(__file__).resolve().parents[1]
ARMS = {"off": "false", "on": "true"}


def run_once(*, overlap: str, seed: int, steps: int, out_dir: Path) -> dict:
    from nimbus.config import load_config
    from nimbus.run.loop import train

    config = load_config(path=REPO / "configs" / "ppo-cartpole.yaml", overrides=[
        f"seed={seed}", f"train.overlap={overlap}", f"train.total_env_steps={steps}", "train.target_return=null",
        "train.eval_episodes=0", "output.report=false", "output.status_line=false", "output.loggers=[]",
        f"output.root_dir={out_dir}"])
    result = train(config=config)
    return {"overlap": overlap, "seed": seed, "env_steps": [row.env_steps for row in result.rows],
            "recent_return": [row.extras["recent_return_mean"] for row in result.rows],
            "wall_s": [row.wall_s for row in result.rows]}


def at_points(*, run: dict, steps: int, points: list[float]) -> dict[str, list[float]]:
    """The recent return and wall seconds of the first round at or past each point's env steps."""
    env_steps = np.asarray(run["env_steps"])
    out: dict[str, list[float]] = {"return": [], "wall_s": []}
    for point in points:
        index = min(int(np.searchsorted(env_steps, point * steps)), len(env_steps) - 1)
        out["return"].append(float(run["recent_return"][index]))
        out["wall_s"].append(float(run["wall_s"][index]))
    return out


def summarise(*, runs: list[dict], steps: int, points: list[float]) -> list[dict]:
    from nimbus.analysis.stats import aggregate, probability_of_improvement

    rows = []
    for j, point in enumerate(points):
        row: dict = {"env_steps": int(point * steps)}
        scores = {}
        for arm, flag in ARMS.items():
            values = [at_points(run=run, steps=steps, points=points) for run in runs if run["overlap"] == flag]
            returns = np.array([v["return"][j] for v in values])
            walls = np.array([v["wall_s"][j] for v in values])
            scores[arm] = returns
            for name, array in (("return", returns), ("wall_s", walls)):
                interval = aggregate(scores_by_task=[array], statistic="iqm")
                row[f"{arm}_{name}"] = {"iqm": interval.point, "low": interval.low, "high": interval.high,
                                        "per_seed": array.tolist()}
        better = probability_of_improvement(x_by_task=[scores["on"]], y_by_task=[scores["off"]])
        row["p_on_better"] = {"point": better.point, "low": better.low, "high": better.high}
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--points", type=float, nargs="+", default=[0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "overlap.json")
    parser.add_argument("--child", choices=tuple(ARMS.values()), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory(prefix="nimbus-bench-") as tmp:
            result = run_once(overlap=args.child, seed=args.seed, steps=args.steps, out_dir=Path(tmp))
        print(child_line(result), flush=True)
        return 0
    runs = []
    for seed in range(args.seeds):
        for flag in ARMS.values():   # interleaved: both arms see the same load
            usage = RunUsage.start()
            cmd = [sys.executable, __file__, "--child", flag, "--seed", str(seed), "--steps", str(args.steps)]
            run = child_result(cmd=cmd, cwd=REPO, timeout_s=args.timeout_s, what=f"overlap={flag} seed {seed}")
            runs.append({**run, **usage.fields()})
    table = summarise(runs=runs, steps=args.steps, points=args.points)
    write_result(path=args.out, result={**record(benchmark="overlap"), "versions": versions(modules=("torch",)),
                                        "seeds": args.seeds, "steps": args.steps, "rows": table, "runs": runs})
    print(f"{'env steps':>10}  {'return off':>24}  {'return on':>24}  {'wall s off':>20}  {'wall s on':>20}  P(on>off)")
    for row in table:
        print(f"{row['env_steps']:>10}  {interval_cell(row['off_return'], '.1f'):>24}  "
              f"{interval_cell(row['on_return'], '.1f'):>24}  {interval_cell(row['off_wall_s'], '.1f'):>20}  "
              f"{interval_cell(row['on_wall_s'], '.1f'):>20}  {row['p_on_better']['point']:.2f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
