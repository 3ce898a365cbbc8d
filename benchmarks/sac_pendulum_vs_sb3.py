"""Wall-clock seconds until the mean return of the last 10 episodes reaches -200: nimbus vs SB3 SAC.

Both sides use rl-baselines3-zoo's Pendulum-v1 SAC hyperparameters (hyperparams/sac.yml: lr 1e-3,
20k steps) over Stable-Baselines3's SAC defaults (batch 256, buffer 1M, learning_starts 100, tau
0.005, gamma 0.99, train_freq 1, gradient_steps 1, automatic entropy, net [256, 256]).

* nimbus: ``train()`` on configs/sac-pendulum.yaml as shipped (``train.workflow: offpolicy``: 2 actor
  functions x 1 env, the learner owes one gradient step per env step, back-pressure 256 steps),
  ``train.target_return=-200``, ``train.return_window=10``; tensorboard on, no report, no final
  evaluation. The clock (``summary.wall_s``) starts just before the system is built (worker spawn and
  pre-warm included) and stops after the final checkpoint that follows the event that reached the
  target (milliseconds); shutting the workers down is not counted, as SB3's teardown is not.
* SB3: ``SAC("MlpPolicy", Monitor(gym.make("Pendulum-v1")), learning_rate=1e-3, seed=s)`` on CPU with
  ``--sb3-threads`` torch threads (default 1, as nimbus's learner: ``learner.torch_threads: 1``); the
  clock starts before the env and model are created; a callback stops learning once the mean of the
  last 10 episode returns (``ep_info_buffer``) is >= -200.

Every run is its own subprocess; runs are interleaved (nimbus seed 0, SB3 seed 0, ...) so both see the
same machine load (the machine is shared). Runs are capped at ``--cap-steps`` (default 20k, the zoo's
budget) and ``--timeout-s``; a run that misses the target (or times out) is reported as not reached,
its time a lower bound. CPU seconds (all processes of the run) are reported beside wall clock.

Run:  python benchmarks/sac_pendulum_vs_sb3.py [--seeds 3] [--cap-steps 20000]
      (writes benchmarks/results/sac_pendulum_vs_sb3.json and prints the table)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import RunUsage, child_line, child_result, record, stats, versions, write_result

REPO = Path(__file__).resolve().parents[1]
SB3_MODULES = ("torch", "gymnasium", "stable_baselines3")
TARGET = -200.0
WINDOW = 10
ZOO = {"learning_rate": 1e-3, "batch_size": 256, "buffer_size": 1_000_000, "learning_starts": 100, "tau": 0.005,
       "gamma": 0.99, "train_freq": 1, "gradient_steps": 1, "ent_coef": "auto", "net_arch": [256, 256]}


def run_nimbus(*, seed: int, cap_steps: int, out_dir: Path) -> dict:
    from nimbus.config import load_config
    from nimbus.run.loop import train

    config = load_config(path=REPO / "configs" / "sac-pendulum.yaml", overrides=[
        f"seed={seed}", f"train.target_return={TARGET}", f"train.return_window={WINDOW}",
        f"train.total_env_steps={cap_steps}", "train.eval_episodes=0", "output.report=false",
        "output.status_line=false", f"output.root_dir={out_dir}"])
    called = time.perf_counter()
    result = train(config=config)
    returned_s = time.perf_counter() - called
    rows = result.rows
    return {"framework": "nimbus", "seed": seed, "reached": result.summary.stopped_by == "target_return",
            "time_to_target_s": result.summary.wall_s, "train_call_s": returned_s,
            "env_steps": result.summary.env_steps, "learner_updates": result.summary.rounds,
            "gradient_steps": int(sum(r.extras["gradient_steps"] for r in rows)),
            "final_return": result.summary.final_return}


def run_sb3(*, seed: int, cap_steps: int, threads: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor

    class StopAtTarget(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.reached_at: float | None = None

        def _on_step(self) -> bool:
            buf = list(self.model.ep_info_buffer)[-WINDOW:]
            if len(buf) >= WINDOW and float(np.mean([info["r"] for info in buf])) >= TARGET:
                self.reached_at = time.perf_counter()
                return False
            return True

    torch.set_num_threads(threads)
    started = time.perf_counter()
    env = Monitor(gym.make("Pendulum-v1"))
    model = SAC("MlpPolicy", env, learning_rate=ZOO["learning_rate"], seed=seed, device="cpu", verbose=0)
    callback = StopAtTarget()
    model.learn(total_timesteps=cap_steps, callback=callback)
    ended = time.perf_counter()
    buf = list(model.ep_info_buffer)[-WINDOW:]
    return {"framework": "sb3", "seed": seed, "reached": callback.reached_at is not None,
            "time_to_target_s": (callback.reached_at or ended) - started, "env_steps": int(model.num_timesteps),
            "gradient_steps": int(model._n_updates),
            "final_return": float(np.mean([info["r"] for info in buf])) if buf else None,
            "sb3_version": stable_baselines3.__version__}


def child(args: argparse.Namespace) -> int:
    if args.child == "nimbus":
        with tempfile.TemporaryDirectory(prefix="nimbus-bench-") as tmp:
            result = run_nimbus(seed=args.seed, cap_steps=args.cap_steps, out_dir=Path(tmp))
    else:
        result = run_sb3(seed=args.seed, cap_steps=args.cap_steps, threads=args.sb3_threads)
    print(child_line(result), flush=True)
    return 0


def spawn(*, framework: str, seed: int, cap_steps: int, timeout_s: float, sb3_threads: int) -> dict:
    cmd = [sys.executable, __file__, "--child", framework, "--seed", str(seed), "--cap-steps", str(cap_steps),
           "--sb3-threads", str(sb3_threads)]
    usage = RunUsage.start()
    try:
        result = child_result(cmd=cmd, cwd=REPO, timeout_s=timeout_s, what=f"{framework} seed {seed}")
    except subprocess.TimeoutExpired:
        result = {"framework": framework, "seed": seed, "reached": False, "timed_out": True,
                  "time_to_target_s": timeout_s, "env_steps": -1, "gradient_steps": -1, "final_return": None}
    return {**result, **usage.fields()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cap-steps", type=int, default=20_000)
    parser.add_argument("--timeout-s", type=float, default=2400.0)
    parser.add_argument("--sb3-threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "sac_pendulum_vs_sb3.json")
    parser.add_argument("--child", choices=("nimbus", "sb3"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    runs: list[dict] = []
    for seed in range(args.seeds):
        for framework in ("nimbus", "sb3"):
            run = spawn(framework=framework, seed=seed, cap_steps=args.cap_steps, timeout_s=args.timeout_s,
                        sb3_threads=args.sb3_threads)
            runs.append(run)
            print(f"{framework:6s} seed {seed}: {run['time_to_target_s']:7.2f} s, {run['env_steps']:6d} steps, "
                  f"{run['gradient_steps']:6d} gradient steps, reached={run['reached']}, cpu {run['cpu_s']:.1f} s, "
                  f"load {run['loadavg_1m_before']:.2f}->{run['loadavg_1m_after']:.2f}", flush=True)
    by = {f: [r for r in runs if r["framework"] == f] for f in ("nimbus", "sb3")}
    summary = {f: {key: stats([r[key] for r in rs]) for key in ("time_to_target_s", "env_steps", "cpu_s")}
               | {"reached": sum(r["reached"] for r in rs), "runs": len(rs)} for f, rs in by.items()}
    ratio = summary["nimbus"]["time_to_target_s"]["median"] / summary["sb3"]["time_to_target_s"]["median"]
    per_seed = [n["time_to_target_s"] / s["time_to_target_s"] for n, s in zip(by["nimbus"], by["sb3"])]
    goal_met = all(r["reached"] for r in runs) and ratio <= 1.0
    print(f"\n{'seconds to mean(last 10) >= -200':34s} {'min':>8s} {'median':>8s} {'max':>8s}  reached")
    for f in ("nimbus", "sb3"):
        s = summary[f]["time_to_target_s"]
        print(f"{f:34s} {s['min']:8.2f} {s['median']:8.2f} {s['max']:8.2f}  {summary[f]['reached']}/{len(by[f])}")
    print(f"ratio nimbus/SB3 of medians: {ratio:.2f} (per seed: {', '.join(f'{r:.2f}' for r in per_seed)}); "
          f"goal <= 1.0: {'met' if goal_met else 'NOT met'}")
    result = {**record(benchmark="sac_pendulum_vs_sb3"), "versions": versions(modules=SB3_MODULES),
              "target_return": TARGET, "return_window": WINDOW, "cap_steps": args.cap_steps, "hyperparameters": ZOO,
              "sb3_threads": args.sb3_threads,
              "runs": runs, "summary": summary, "ratio_of_medians": ratio, "ratio_per_seed": per_seed,
              "goal_ratio": 1.0, "goal_met": goal_met}
    print(f"wrote {write_result(path=args.out, result=result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
