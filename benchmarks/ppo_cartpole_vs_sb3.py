"""Wall-clock seconds until the mean return of the last 100 episodes reaches 475: nimbus vs SB3 PPO.

Both sides use rl-baselines3-zoo's tuned CartPole-v1 PPO hyperparameters: 8 envs (nimbus: 2 actor
functions x 4 envs), n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98, n_epochs 20, ent_coef 0,
lr linear from 0.001, clip linear from 0.2, schedules over rl-zoo's n_timesteps = 100k env steps.

* nimbus: ``nimbus.run.loop.train`` on configs/ppo-cartpole.yaml (local backend, tensorboard and
  status line as shipped; no report rendering, no final evaluation), ``train.target_return=475``,
  ``train.return_window=100``. The clock starts just before ``train()`` (so it includes building the
  system, spawning and pre-warming the workers) and stops when the round that reached the target
  ended. Reported separately: start-up (call -> first round dispatched) and time to the end of round 0.
* SB3: ``PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=s), ...)`` on CPU with its
  default threads (one per core, as a user gets; ``--sb3-torch-threads`` to change it); the clock starts
  before the env and model are created; a callback stops learning once the mean of the last 100
  episode returns (``ep_info_buffer``, 100 deep) is >= 475.

The machine's 1-minute load average before and after each run, and each run's CPU seconds (all its
processes), are recorded beside the times: on a shared machine they say how far a run was disturbed.

Every run is its own subprocess; runs are interleaved (nimbus seed 0, SB3 seed 0, nimbus seed 1, ...)
so both see the same machine load. Each run is capped at ``--cap-steps`` env steps (default 100k: the
schedules reach 0 there, as in rl-zoo); a run that misses the target is reported as not reached and
its time counts as a lower bound.

Run:  python benchmarks/ppo_cartpole_vs_sb3.py [--seeds 3] [--cap-steps 100000] [--nimbus-src DIR]
      [--set actors.env_backend=envpool --set train.overlap=true]   (nimbus config overrides)
      (writes benchmarks/results/ppo_cartpole_vs_sb3.json and prints the table)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import RunUsage, child_line, child_result, record, stats, versions, write_result

REPO = Path(__file__).resolve().parents[1]
SB3_MODULES = ("torch", "gymnasium", "stable_baselines3")
TARGET = 475.0
WINDOW = 100
ZOO = {"n_envs": 8, "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20,
       "ent_coef": 0.0, "lr": 0.001, "clip": 0.2}


# ------------------------------------------------------------------------------------------- children
def run_nimbus(*, seed: int, cap_steps: int, out_dir: Path, overrides: list[str]) -> dict:
    from nimbus.config import load_config
    from nimbus.run.loop import train

    config = load_config(path=REPO / "configs" / "ppo-cartpole.yaml", overrides=[
        f"seed={seed}", f"train.target_return={TARGET}", f"train.return_window={WINDOW}",
        f"train.total_env_steps={cap_steps}", "train.eval_episodes=0", "output.report=false",
        f"output.root_dir={out_dir}", *overrides])
    called_wall = time.time()
    called = time.perf_counter()
    result = train(config=config)
    returned_s = time.perf_counter() - called
    ledger = [json.loads(line) for line in (result.run_dir / "ledger.jsonl").read_text().splitlines()]
    first_dispatch = min(r["queued_at"] for r in ledger if r["kind"] == "actor" and r["outcome"] != "prewarm")
    startup_s = first_dispatch - called_wall          # build + spawn + prewarm, until round 0 is dispatched
    # Each round ends with its learner's result, and the run stops at the round that reached the target: the clock
    # reads the ledger's (epoch) end times against the call's. (Not the rows' wall_s, whose zero is wherever the run's
    # book started: it moved from round 0's dispatch to before the start-up on 2026-12-07, which counted the start-up
    # twice in this sum.)
    learned = sorted(r["end_at"] for r in ledger if r["kind"] == "learner" and r["outcome"] == "ok")
    return {"framework": "nimbus", "seed": seed, "reached": result.summary.stopped_by == "target_return",
            "time_to_target_s": learned[-1] - called_wall, "startup_s": startup_s,
            "first_round_done_s": learned[0] - called_wall, "train_call_s": returned_s,
            "env_steps": result.summary.env_steps, "rounds": result.summary.rounds,
            "final_return": result.summary.final_return}


def run_sb3(*, seed: int, cap_steps: int, torch_threads: int | None) -> dict:
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import LinearSchedule

    class StopAtTarget(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.reached_at: float | None = None

        def _on_step(self) -> bool:
            buf = self.model.ep_info_buffer
            if len(buf) >= WINDOW and float(np.mean([info["r"] for info in buf])) >= TARGET:
                self.reached_at = time.perf_counter()
                return False
            return True

    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    started = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=ZOO["n_envs"], seed=seed)
    model = PPO("MlpPolicy", env, n_steps=ZOO["n_steps"], batch_size=ZOO["batch_size"],
                gae_lambda=ZOO["gae_lambda"], gamma=ZOO["gamma"], n_epochs=ZOO["n_epochs"], ent_coef=ZOO["ent_coef"],
                learning_rate=LinearSchedule(ZOO["lr"], 0.0, 1.0), clip_range=LinearSchedule(ZOO["clip"], 0.0, 1.0),
                seed=seed, device="cpu", verbose=0)
    callback = StopAtTarget()
    model.learn(total_timesteps=cap_steps, callback=callback)
    ended = time.perf_counter()
    buf = model.ep_info_buffer
    return {"framework": "sb3", "seed": seed, "reached": callback.reached_at is not None,
            "time_to_target_s": (callback.reached_at or ended) - started, "env_steps": int(model.num_timesteps),
            "final_return": float(np.mean([info["r"] for info in buf])) if buf else None,
            "sb3_version": stable_baselines3.__version__, "torch_threads": torch.get_num_threads()}


def child(args: argparse.Namespace) -> int:
    if args.child == "nimbus":
        with tempfile.TemporaryDirectory(prefix="nimbus-bench-") as tmp:
            result = run_nimbus(seed=args.seed, cap_steps=args.cap_steps, out_dir=Path(tmp), overrides=args.set)
    else:
        result = run_sb3(seed=args.seed, cap_steps=args.cap_steps, torch_threads=args.sb3_torch_threads)
    print(child_line(result), flush=True)
    return 0


# ------------------------------------------------------------------------------------------- parent
def spawn(*, framework: str, seed: int, cap_steps: int, nimbus_src: Path | None, timeout_s: float,
          sb3_torch_threads: int | None, overrides: list[str]) -> dict:
    env = dict(os.environ)
    if nimbus_src is not None:
        env["PYTHONPATH"] = f"{nimbus_src}{os.pathsep}{env.get('PYTHONPATH', '')}"
    cmd = [sys.executable, __file__, "--child", framework, "--seed", str(seed), "--cap-steps", str(cap_steps)]
    if sb3_torch_threads is not None:
        cmd += ["--sb3-torch-threads", str(sb3_torch_threads)]
    for override in overrides:
        cmd += ["--set", override]
    usage = RunUsage.start()
    result = child_result(cmd=cmd, env=env, cwd=REPO, timeout_s=timeout_s, what=f"{framework} seed {seed}")
    _reap_orphans()
    # machine load around the run (the machine is shared) and the CPU seconds the run used, workers included
    return {**result, **usage.fields()}


def _become_subreaper() -> None:
    """Orphaned descendants (the fork server's workers outlive its SIGKILL by a moment, then PDEATHSIG ends them)
    are re-parented to this process instead of init, so ``_reap_orphans`` can wait for them and their CPU time
    reaches RUSAGE_CHILDREN. Without this, nimbus's CPU seconds missed every worker's."""
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _reap_orphans(*, timeout_s: float = 10.0) -> None:
    """Wait for every remaining descendant (they are dying: PDEATHSIG), so their CPU time is counted."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)
    raise RuntimeError(f"descendants still alive {timeout_s} s after the run ended")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cap-steps", type=int, default=100_000)
    parser.add_argument("--nimbus-src", type=Path, default=None, help="run nimbus from this src/ (default: installed)")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--sb3-torch-threads", type=int, default=None,
                        help="torch.set_num_threads for SB3 (default: torch's own, one per core, as a user gets)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "ppo_cartpole_vs_sb3.json")
    parser.add_argument("--child", choices=("nimbus", "sb3"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="a nimbus config override (repeatable), e.g. actors.env_backend=envpool, "
                             "train.overlap=true")
    args = parser.parse_args()
    if args.child:
        return child(args)

    _become_subreaper()
    runs: list[dict] = []
    for seed in range(args.seeds):
        for framework in ("nimbus", "sb3"):
            run = spawn(framework=framework, seed=seed, cap_steps=args.cap_steps, nimbus_src=args.nimbus_src,
                        timeout_s=args.timeout_s, sb3_torch_threads=args.sb3_torch_threads, overrides=args.set)
            runs.append(run)
            print(f"{framework:6s} seed {seed}: {run['time_to_target_s']:7.2f} s, {run['env_steps']:7d} steps, "
                  f"reached={run['reached']}, cpu {run['cpu_s']:.1f} s, load {run['loadavg_1m_before']:.2f}"
                  f"->{run['loadavg_1m_after']:.2f}", flush=True)
    by = {f: [r for r in runs if r["framework"] == f] for f in ("nimbus", "sb3")}
    summary = {f: {"time_to_target_s": stats([r["time_to_target_s"] for r in rs]),
                   "env_steps": stats([r["env_steps"] for r in rs]), "cpu_s": stats([r["cpu_s"] for r in rs]),
                   "reached": sum(r["reached"] for r in rs),
                   "runs": len(rs)} for f, rs in by.items()}
    summary["nimbus"]["startup_s"] = stats([r["startup_s"] for r in by["nimbus"]])
    summary["nimbus"]["first_round_done_s"] = stats([r["first_round_done_s"] for r in by["nimbus"]])
    ratio = summary["nimbus"]["time_to_target_s"]["median"] / summary["sb3"]["time_to_target_s"]["median"]
    per_seed = [n["time_to_target_s"] / s["time_to_target_s"] for n, s in zip(by["nimbus"], by["sb3"])]
    all_reached = all(r["reached"] for r in runs)
    goal_met = all_reached and ratio <= 0.8

    print(f"\n{'seconds to mean(last 100) >= 475':38s} {'min':>8s} {'median':>8s} {'max':>8s}  reached")
    for f in ("nimbus", "sb3"):
        s = summary[f]["time_to_target_s"]
        print(f"{f:38s} {s['min']:8.2f} {s['median']:8.2f} {s['max']:8.2f}  {summary[f]['reached']}/{len(by[f])}")
    for name in ("startup_s", "first_round_done_s"):
        s = summary["nimbus"][name]
        print(f"{'nimbus ' + name:38s} {s['min']:8.2f} {s['median']:8.2f} {s['max']:8.2f}")
    for f in ("nimbus", "sb3"):
        s = summary[f]["env_steps"]
        print(f"{f + ' env steps':38s} {s['min']:8.0f} {s['median']:8.0f} {s['max']:8.0f}")
    for f in ("nimbus", "sb3"):
        s = summary[f]["cpu_s"]
        print(f"{f + ' CPU seconds (all processes)':38s} {s['min']:8.1f} {s['median']:8.1f} {s['max']:8.1f}")
    print(f"ratio nimbus/SB3 of medians: {ratio:.2f} (per seed: {', '.join(f'{r:.2f}' for r in per_seed)}); "
          f"goal <= 0.8: {'met' if goal_met else 'NOT met'}")

    result = {**record(benchmark="ppo_cartpole_vs_sb3"), "versions": versions(modules=SB3_MODULES),
              "target_return": TARGET, "return_window": WINDOW, "cap_steps": args.cap_steps, "hyperparameters": ZOO,
              "runs": runs, "summary": summary, "ratio_of_medians": ratio, "ratio_per_seed": per_seed,
              "goal_ratio": 0.8, "goal_met": goal_met, "nimbus_overrides": args.set}
    print(f"wrote {write_result(path=args.out, result=result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
