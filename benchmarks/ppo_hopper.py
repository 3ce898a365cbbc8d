"""PPO on Hopper-v5, issue 3: nimbus vs Stable-Baselines3 (env steps/s overall) and ARTOS pipelines
on vs off (round latency), side by side.

Both sides use SB3's PPO defaults: 2048 env steps per update, minibatch 64, 10 epochs, lr 3e-4 constant,
gamma 0.99, GAE λ 0.95, clip 0.2, no value clipping, ent 0, vf 0.5, max grad norm 0.5, 64×64 tanh
actor and critic, Adam eps 1e-5, advantages normalised per minibatch, no observation normalisation.

* ``sb3``: ``PPO("MlpPolicy", Monitor(gym.make("Hopper-v5")))`` on the CPU, clock = ``model.learn(steps)``,
  with ``torch.set_num_threads(--sb3-threads)`` (default 1, as nimbus's learner): on this shared,
  loaded 2-core machine torch's default 2 OpenMP threads made SB3 ~10× slower (54 steps/s), which
  would flatter nimbus.
* ``nimbus``: ``train()`` with 2 actor functions × 1 env × 1024 steps (2048 rows per update), the
  learner on 1 torch thread, capacity = cores; clock = the workflow's ``wall_s`` at the last round
  (worker start-up before round 0 excluded, as SB3's process start is).
* ``nimbus_pipe``: the same with ``pipeline.minibatch`` and ``pipeline.dual_stage`` on.
* ``nimbus_vec``: 2 actor functions × 4 envs × 256 steps — the same 2048-row update (every PPO
  hyperparameter equal), but 8 env streams per actor pair instead of SB3's one, so policy inference
  is batched over 4 envs.
* ``nimbus_envpool``: as ``nimbus_vec`` with ``actors.env_backend: envpool`` (EnvPool's C++ Hopper-v5, the
  ``envpool`` extra; docs/envs.md says how its MuJoCo differs); ``nimbus_overlap``: that plus ``train.overlap``
  (the next round samples while the learner trains, one version of lag).

Equal learning: each run also reports its final return (nimbus: the last 100 episodes' mean; SB3: its
``ep_info_buffer``, the last 100 episodes), to compare the variants' learning at the same env steps.

Each run is its own subprocess; the variants are interleaved per repeat (the machine is shared).
Reported: env steps/s (min/median/max over repeats), env steps per CPU-second (SB3: its process during
``learn``; nimbus: driver + all workers over the whole ``train()``, start-up included — a load-independent
view of the work each does), and for nimbus the median round latency (``round_s``) over rounds 2.. of
each run (rounds 0-1 include warm-up).

Run:  python benchmarks/ppo_hopper.py [--repeats 3] [--steps 20480] [--variants sb3 nimbus_envpool ...]
      (writes benchmarks/results/ppo_hopper.json)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import child_line, child_result, write_result

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("sb3", "nimbus", "nimbus_pipe", "nimbus_vec", "nimbus_envpool", "nimbus_overlap")


def run_sb3(*, steps: int, seed: int, threads: int) -> dict:
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor

    if threads > 0:
        torch.set_num_threads(threads)
    env = Monitor(gym.make("Hopper-v5"))
    model = PPO("MlpPolicy", env, seed=seed, device="cpu")
    started, cpu = time.perf_counter(), cpu_s()
    model.learn(total_timesteps=steps)
    wall_s, used = time.perf_counter() - started, cpu_s() - cpu
    returns = [info["r"] for info in model.ep_info_buffer]
    return {"env_steps": model.num_timesteps, "wall_s": wall_s, "steps_per_s": model.num_timesteps / wall_s,
            "cpu_s": used, "steps_per_cpu_s": model.num_timesteps / used,
            "final_return": statistics.mean(returns) if returns else None}


def cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (nimbus's workers, once shut down)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_nimbus(*, steps: int, seed: int, pipelined: bool, out_dir: Path, envs_per_actor: int = 1,
               env_backend: str = "gymnasium", overlap: bool = False) -> dict:
    from nimbus.config import parse_config
    from nimbus.run.loop import train

    data = {"name": "ppo-hopper-bench", "seed": seed, "env": {"id": "Hopper-v5", "num_envs_per_actor": envs_per_actor},
            "algo": {"name": "ppo", "lr": 3e-4, "num_epochs": 10, "minibatch_size": 64, "gamma": 0.99,
                     "gae_lambda": 0.95, "clip_coef": 0.2, "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5,
                     "hidden_sizes": [64, 64], "activation": "tanh", "adam_eps": 1e-5},
            "actors": {"scaling": {"kind": "fixed", "num_actors": 2}, "fragment_steps": 1024 // envs_per_actor,
                       "env_backend": env_backend},
            "learner": {"device": "cpu", "torch_threads": 1},
            "pipeline": {"minibatch": pipelined, "dual_stage": pipelined},
            "train": {"total_env_steps": steps, "eval_episodes": 0, "checkpoint_every_rounds": 1000,
                      "overlap": overlap},
            "output": {"root_dir": str(out_dir), "loggers": [], "report": False, "status_line": False}}
    cpu = cpu_s()
    result = train(config=parse_config(data=data))
    used = cpu_s() - cpu  # driver + every worker, start-up and shutdown included (an upper bound)
    rows = result.rows
    wall_s = rows[-1].wall_s
    round_s = [row.round_s for row in rows[2:]]
    return {"env_steps": rows[-1].env_steps, "wall_s": wall_s, "steps_per_s": rows[-1].env_steps / wall_s,
            "round_s_median": statistics.median(round_s), "round_s": round_s,
            "learning_s_median": statistics.median(row.learning_s for row in rows[2:]),
            "final_return": result.summary.final_return, "cpu_s": used,
            "steps_per_cpu_s": rows[-1].env_steps / used}


def child(args: argparse.Namespace) -> None:
    if args.child == "sb3":
        out = run_sb3(steps=args.steps, seed=args.seed, threads=args.sb3_threads)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = run_nimbus(steps=args.steps, seed=args.seed, pipelined=args.child == "nimbus_pipe",
                             out_dir=Path(tmp), envs_per_actor=1 if args.child in ("nimbus", "nimbus_pipe") else 4,
                             env_backend="envpool" if args.child in ("nimbus_envpool", "nimbus_overlap") else
                             "gymnasium", overlap=args.child == "nimbus_overlap")
    print(child_line(out), flush=True)


def parent(args: argparse.Namespace) -> None:
    from nimbus.bench.transfer import environment

    runs: dict[str, list[dict]] = {name: [] for name in args.variants}
    for repeat in range(args.repeats):
        for name in args.variants:
            runs[name].append(child_result(cmd=[sys.executable, __file__, "--child", name, "--steps", str(args.steps),
                                                "--seed", str(repeat), "--sb3-threads", str(args.sb3_threads)],
                                           cwd=REPO, timeout_s=None, what=name))
            print(f"repeat {repeat} {name}: {runs[name][-1]['steps_per_s']:.0f} steps/s", flush=True)
    summary = {}
    for name, results in runs.items():
        rates = [r["steps_per_s"] for r in results]
        summary[name] = {"steps_per_s": [min(rates), statistics.median(rates), max(rates)]}
        per_cpu = [r["steps_per_cpu_s"] for r in results if "steps_per_cpu_s" in r]
        if per_cpu:
            summary[name]["steps_per_cpu_s"] = [min(per_cpu), statistics.median(per_cpu), max(per_cpu)]
        summary[name]["final_return"] = [r.get("final_return") for r in results]
        if name != "sb3":
            rounds = [r["round_s_median"] for r in results]
            summary[name]["round_s_median"] = [min(rounds), statistics.median(rounds), max(rounds)]
    if "sb3" in summary:
        sb3 = summary["sb3"]["steps_per_s"][1]
        for name in summary.keys() - {"sb3"}:
            summary[f"ratio_{name}_to_sb3"] = summary[name]["steps_per_s"][1] / sb3
    if {"nimbus", "nimbus_pipe"} <= summary.keys():
        summary["round_latency_reduction"] = 1 - summary["nimbus_pipe"]["round_s_median"][1] / \
            summary["nimbus"]["round_s_median"][1]
    out = {"summary": summary, "runs": runs, "steps": args.steps, "sb3_threads": args.sb3_threads,
           "environment": environment()}
    write_result(path=Path(args.json), result=out, indent=1)
    print(json.dumps(summary, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--steps", type=int, default=20480)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sb3-threads", type=int, default=1, help="torch threads for SB3 (0: torch's default)")
    parser.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "ppo_hopper.json"))
    args = parser.parse_args()
    child(args) if args.child else parent(args)


if __name__ == "__main__":
    main()
