"""Simulated vs real: PPO CartPole at 1, 2 and 4 actors, round time, cost and return curve (issue 30 item 3).

For each seed: real runs (local backend) at 1, 2 and 4 actors; the 1- and 2-actor runs are profiled together
(``nimbus simulate fit``: per-kind lognormal durations, cold starts, stragglers, failures, and the learner's
per-row time from the two batch sizes); then a simulated run (``runtime.backend: simulated``,
``simulation.profile`` = that profile) of the same config and seed at every actor count. So 1 and 2 actors are
in-sample and 4 actors is a prediction of a scale the profile never saw. Both
backends get ``runtime.capacity_cpus`` = this machine's cores, so the simulation queues actors the way the real
machine time-slices them, and ``algo.minibatch_size: 128`` (one actor's round; the shipped 256 needs two actors).
Every run is a fresh subprocess.

Per (actors, seed), real vs simulated:

* **round time**: the median ``round_s`` over rounds after ``--warmup``; error = simulated / real - 1;
* **cost**: ``summary.serverless_cost_usd`` per round (the ledger priced by cost/pricing.yaml); error as above;
* **total time**: ``summary.wall_s`` (a tail the median hides shows here and in the cost); error as above;
* **return curve**: ``recent_return_mean`` at each round (same env steps on both: onpolicy PPO rounds are fixed
  size); error = the largest absolute difference over the rounds, and whether the curves are identical
  (the learning is the same computation on both backends: onpolicy PPO on CPU is deterministic for a seed).

Then the error's median over seeds for each actor count. Writes benchmarks/results/simulated_vs_real.json.

Run:  python benchmarks/simulated_vs_real.py [--seeds 3] [--env-steps 20480]
Small check (about 2 minutes):  python benchmarks/simulated_vs_real.py --seeds 1 --env-steps 1536 --warmup 1
On a GPU machine (scripts/gpu_check.sh runs it):  ... --learner-device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ACTORS = (1, 2, 4)
FITTED = (1, 2)   # the actor counts whose real runs the profile is fitted from (4 is out of sample)
MINIBATCH = "algo.minibatch_size=128"   # one actor's round (4 envs x 32 steps): the shipped 256 needs 2 actors


def run_child(*, backend: str, actors: int, seed: int, env_steps: int, run_dir: Path, profile: str | None,
              learner_device: str | None = None) -> dict:
    """One run in this process; its rows and summary as JSON-ready data."""
    from nimbus.config import load_config
    from nimbus.run.loop import train

    overrides = [f"seed={seed}", f"runtime.backend={backend}", f"actors.scaling.num_actors={actors}",
                 f"runtime.capacity_cpus={os.cpu_count()}", f"train.total_env_steps={env_steps}", MINIBATCH,
                 "train.target_return=100000", "train.eval_episodes=0", "train.checkpoint_every_rounds=100000",
                 "output.report=false", "output.loggers=[]", "output.status_line=false"]
    if profile is not None:
        overrides.append(f"simulation.profile={profile}")
    if learner_device is not None:
        overrides.append(f"learner.device={learner_device}")
    result = train(config=load_config(path=REPO / "configs" / "ppo-cartpole.yaml", overrides=overrides),
                   run_dir=run_dir)
    rows = [{"round": r.round, "env_steps": r.env_steps, "round_s": r.round_s, "cost_usd": r.cost_usd,
             "recent_return_mean": r.extras.get("recent_return_mean")} for r in result.rows]
    return {"backend": backend, "actors": actors, "seed": seed, "run_dir": str(run_dir), "rows": rows,
            "rounds": result.summary.rounds, "cost_usd": result.summary.serverless_cost_usd,
            "wall_s": result.summary.wall_s}


def spawn(**kwargs) -> dict:
    """``run_child`` in a fresh interpreter (no state carried between runs)."""
    args = [sys.executable, __file__, "--child", json.dumps({k: str(v) if isinstance(v, Path) else v
                                                              for k, v in kwargs.items()})]
    out = subprocess.run(args, check=True, capture_output=True, text=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(*, real: dict, simulated: dict, warmup: int) -> dict:
    """The errors of one (actors, seed) pair (module docstring)."""
    def median_round_s(run: dict) -> float:
        rows = run["rows"][warmup:] or run["rows"]
        return statistics.median(r["round_s"] for r in rows)

    real_s, sim_s = median_round_s(real), median_round_s(simulated)
    real_cost, sim_cost = real["cost_usd"] / real["rounds"], simulated["cost_usd"] / simulated["rounds"]
    pairs = [(a["recent_return_mean"], b["recent_return_mean"]) for a, b in zip(real["rows"], simulated["rows"])
             if a["recent_return_mean"] is not None and b["recent_return_mean"] is not None]
    finite = [(a, b) for a, b in pairs if a == a and b == b]   # drop NaN (rounds before the first episode)
    return {"actors": real["actors"], "seed": real["seed"], "real_round_s": real_s, "simulated_round_s": sim_s,
            "round_s_error": sim_s / real_s - 1, "real_cost_per_round_usd": real_cost,
            "simulated_cost_per_round_usd": sim_cost, "cost_error": sim_cost / real_cost - 1,
            "return_max_abs_diff": max((abs(a - b) for a, b in finite), default=float("nan")),
            "return_curves_identical": bool(finite) and all(a == b for a, b in finite),
            "real_wall_s": real["wall_s"], "simulated_wall_s": simulated["wall_s"],
            "wall_s_error": simulated["wall_s"] / real["wall_s"] - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--env-steps", type=int, default=20480)
    parser.add_argument("--warmup", type=int, default=3, help="rounds left out of the round-time median")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "simulated_vs_real.json"))
    parser.add_argument("--learner-device", default=None,
                        help="learner.device for every run (cuda: the check on a GPU machine; default: the config's)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kwargs = json.loads(args.child)
        kwargs["run_dir"] = Path(kwargs["run_dir"])
        print(json.dumps(run_child(**kwargs)))
        return
    from nimbus.runtime.simulated_fit import fit_profile, write_profile

    pairs = []
    with tempfile.TemporaryDirectory(prefix="nimbus-simvsreal-") as tmp:
        for seed in range(args.seeds):
            real = {n: spawn(backend="local", actors=n, seed=seed, env_steps=args.env_steps,
                             run_dir=Path(tmp) / f"real-{n}-{seed}", profile=None,
                             learner_device=args.learner_device) for n in ACTORS}
            profile = write_profile(profile=fit_profile(run_dirs=[Path(real[n]["run_dir"]) for n in FITTED]),
                                    path=Path(tmp) / f"profile-{seed}.yaml")
            for n in ACTORS:
                simulated = spawn(backend="simulated", actors=n, seed=seed, env_steps=args.env_steps,
                                  run_dir=Path(tmp) / f"sim-{n}-{seed}", profile=str(profile),
                                  learner_device=args.learner_device)
                pairs.append(compare(real=real[n], simulated=simulated, warmup=args.warmup))
                print(json.dumps(pairs[-1]), flush=True)
    summary = {n: {key: statistics.median(p[key] for p in pairs if p["actors"] == n)
                   for key in ("round_s_error", "cost_error", "wall_s_error", "return_max_abs_diff")}
               for n in ACTORS}
    for n, errors in summary.items():
        print(f"{n} actor(s): round time {errors['round_s_error']:+.1%}, cost {errors['cost_error']:+.1%}, "
              f"total time {errors['wall_s_error']:+.1%}, "
              f"return curve max |diff| {errors['return_max_abs_diff']:.2f} (median over {args.seeds} seed(s))")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), "args": vars(args),
                               "pairs": pairs, "median_errors": summary}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
