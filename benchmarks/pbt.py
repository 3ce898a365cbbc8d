"""PBT vs the same learning rates trained independently (issue 11, Measure): PPO on Acrobot-v1.

Why Acrobot-v1: a discrete-action task PPO solves within tens of thousands of steps, where the learning
rate over [1e-5, 1e-2] (three decades) should decide the outcome within this budget: too small and the
policy hardly leaves the random policy's -500, too large and updates overshoot. Pendulum-v1 needs far
more PPO env steps than a ~12-minute budget on 2 cores allows. (Expectations, not measurements: the
figure is what this script measures.)

Arms, per seed (the same 4 learning rates, drawn log-uniformly in [1e-5, 1e-2] from the seed):
* ``pbt``: one run with ``pbt: {members: 4, interval_rounds: 4, fraction: 0.25}`` over ``lr``; each member
  stops at ``--steps`` env steps (so 4 x steps in all).
* ``independent``: 4 separate runs, one per drawn learning rate, ``--steps`` each (the same total).
* ``pbt-sync``: the ``pbt`` run with ``pbt.synchronous: true`` (``--arms pbt pbt-sync``): a member that ends a
  ranking round waits for the population, which is ranked a generation at a time; what the wait costs in wall
  time and what it changes in return and exploits.
Each final policy is evaluated on ``--eval-episodes`` episodes with a fixed seed (12345, sampling
actions, as ``nimbus eval``). Reported per arm: best and median final evaluation return per seed, and
their mean over seeds. Goal: PBT's best >= the independent best, PBT's median clearly above.

Full figure (run alone on a quiet machine; 3 seeds x 8 trainings of 30k steps = 720k env steps, estimated
at 10-12 min on 2 quiet cores; check the first seed's wall time and lower --steps if it runs long):
    python benchmarks/pbt.py --seeds 0 1 2 --steps 30000      (writes benchmarks/results/pbt.json)
All three arms, interleaved per seed (5 seeds, 100k steps, ~20 min alone):
    python benchmarks/pbt.py --seeds 0 1 2 3 4 --steps 100000 --arms pbt pbt-sync independent \
        --output benchmarks/results/pbt_sync_100k.json
Smoke check (seconds):  python benchmarks/pbt.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import write_result
from nimbus.analysis.stats import aggregate
from nimbus.config import NimbusConfig, apply_overrides, parse_config
from nimbus.pbt.config import MutationConfig
from nimbus.pbt.explore import initial_values
from nimbus.roles.evaluate import evaluate_checkpoint
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[1]
LR = MutationConfig(low=1e-5, high=1e-2, log=True)
BASE = {
    "name": "pbt-acrobot", "env": {"id": "Acrobot-v1", "num_envs_per_actor": 4},
    "algo": {"name": "ppo", "gamma": 0.99, "gae_lambda": 0.94, "lr": 1e-3, "clip_coef": 0.2, "num_epochs": 4,
             "minibatch_size": 128, "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5, "normalize_obs": False},
    "actors": {"scaling": {"kind": "fixed", "num_actors": 1}, "fragment_steps": 64},
    "train": {"return_window": 20, "checkpoint_every_rounds": 1000, "eval_episodes": 0},
    "output": {"loggers": [], "report": False, "status_line": False},
}


def config(*, root: Path, seed: int, steps: int, overrides: list[str]) -> NimbusConfig:
    data = json.loads(json.dumps(BASE))
    data["seed"], data["output"]["root_dir"] = seed, str(root)
    data["train"]["total_env_steps"] = steps
    return parse_config(data=apply_overrides(data=data, overrides=overrides))


def evaluate(*, run_dir: Path, episodes: int) -> float:
    return float(evaluate_checkpoint(path=run_dir, episodes=episodes, seed=12345).mean_return)


ARMS = ("pbt", "pbt-sync", "independent")


def run_pbt(*, seed: int, steps: int, episodes: int, interval: int, root: Path, synchronous: bool) -> dict:
    """One population of 4: each member's final evaluation, the exploits, the wall time."""
    started = time.perf_counter()
    result = train(config=config(root=root, seed=seed, steps=steps, overrides=[
        f"pbt={{members: 4, interval_rounds: {interval}, fraction: 0.25, synchronous: {str(synchronous).lower()}, "
        "hyperparameters: {lr: {low: 1.0e-5, high: 1.0e-2, log: true}}}"]))
    wall_s = time.perf_counter() - started
    members = sorted((result.run_dir / "policies").iterdir())
    returns = [evaluate(run_dir=member, episodes=episodes) for member in members]
    exploits = json.loads((result.run_dir / "population.json").read_text())["exploits"]
    return {"returns": returns, "exploits": exploits, "wall_s": wall_s}


def run_independent(*, seed: int, lrs: list[float], steps: int, episodes: int, root: Path) -> dict:
    """The population's drawn learning rates trained alone, one after the other (member i: seed + i and lr_i)."""
    started = time.perf_counter()
    returns = []
    for i, lr in enumerate(lrs):
        result = train(config=config(root=root, seed=seed + i, steps=steps, overrides=[f"algo.lr={lr}"]))
        returns.append(evaluate(run_dir=result.run_dir, episodes=episodes))
    return {"returns": returns, "exploits": 0, "wall_s": time.perf_counter() - started}


def run_seed(*, seed: int, arms: list[str], steps: int, episodes: int, interval: int, root: Path) -> dict:
    """Every arm of one seed, one after the other (arms interleave across seeds)."""
    row: dict = {"seed": seed, "lrs": [d["lr"] for d in initial_values(space={"lr": LR}, members=4, seed=seed)]}
    for arm in arms:
        if arm == "independent":
            row[arm] = run_independent(seed=seed, lrs=row["lrs"], steps=steps, episodes=episodes, root=root)
        else:
            row[arm] = run_pbt(seed=seed, steps=steps, episodes=episodes, interval=interval, root=root,
                               synchronous=arm == "pbt-sync")
        print(f"seed {seed} {arm}: {json.dumps(row[arm])}", flush=True)
    return row


def iqm_interval(values: list[float]) -> dict:
    """IQM over seeds with its 95 % bootstrap interval (nimbus.analysis.stats.aggregate)."""
    found = aggregate(scores_by_task=[np.asarray(values, dtype=np.float64)], statistic="iqm")
    return {"iqm": found.point, "low": found.low, "high": found.high}


def summarise(rows: list[dict], arms: list[str]) -> dict:
    out = {}
    for arm in arms:
        best = [max(r[arm]["returns"]) for r in rows]
        median = [statistics.median(r[arm]["returns"]) for r in rows]
        wall = [r[arm]["wall_s"] for r in rows]
        out[arm] = {"best_per_seed": best, "median_per_seed": median, "wall_s_per_seed": wall,
                    "exploits_per_seed": [r[arm]["exploits"] for r in rows],
                    "best_mean": statistics.mean(best), "median_mean": statistics.mean(median),
                    "best_iqm": iqm_interval(best), "median_iqm": iqm_interval(median),
                    "wall_s_iqm": iqm_interval(wall)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30_000, help="env steps per member (and per independent run)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--interval", type=int, default=4, help="pbt.interval_rounds")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=["pbt", "independent"],
                        help="pbt (members ranked one at a time), pbt-sync (pbt.synchronous: a generation at a "
                             "time), independent (the same learning rates alone)")
    parser.add_argument("--smoke", action="store_true", help="one seed, 1.5k steps, 2 eval episodes (seconds)")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "pbt.json"))
    args = parser.parse_args()
    if args.smoke:
        args.seeds, args.steps, args.eval_episodes, args.interval = [0], 1536, 2, 1
    with tempfile.TemporaryDirectory(prefix="nimbus-pbt-bench-") as tmp:
        load_before = os.getloadavg()
        rows = [run_seed(seed=seed, arms=args.arms, steps=args.steps, episodes=args.eval_episodes,
                         interval=args.interval, root=Path(tmp)) for seed in args.seeds]
    report = {"env": "Acrobot-v1", "steps_per_member": args.steps, "seeds": args.seeds, "arms": args.arms,
              "load_avg_before": load_before, "load_avg_after": os.getloadavg(), "runs": rows,
              "summary": summarise(rows, args.arms)}
    print(json.dumps(report["summary"], indent=1))
    if not args.smoke:
        write_result(path=Path(args.output), result=report, indent=1)


if __name__ == "__main__":
    main()
