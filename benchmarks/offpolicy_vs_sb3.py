"""Final returns at equal env steps, nimbus vs Stable-Baselines3 (issue 15, item 7).

Tasks (``--tasks``), each nimbus config as shipped against SB3 with the same hyperparameters where both
have them (read from the nimbus config: lr, batch, buffer, learning_starts, γ, τ, train_freq,
gradient_steps, network; DQN's ε schedule and target interval):

    dqn-cartpole     DQN CartPole-v1, 50k steps      (configs/dqn-cartpole.yaml; rl-zoo reaches 500)
    sac-pendulum     SAC Pendulum-v1, 20k steps      (configs/sac-pendulum.yaml)
    sac-hopper       SAC Hopper-v5, 100k steps       (configs/sac-hopper.yaml)
    impala-cartpole  IMPALA and IMPACT CartPole-v1, 100k steps (configs/impala-cartpole.yaml) against SB3's
                     PPO with rl-zoo's CartPole-v1 hyperparameters (SB3 has no IMPALA)

Every run is its own subprocess and frameworks are interleaved per seed (nimbus s0, SB3 s0, nimbus s1,
...) so both see the same load on the shared machine. After training, the final policy plays
``--eval-episodes`` deterministic episodes (mode / greedy action) on seeds 12345, 12346, ... — the same
episodes for both frameworks. Reported per task and framework: evaluation return mean ± sample std
(min..max) over seeds, wall time (process start to the end of training, evaluation excluded), env steps.

Run:  python benchmarks/offpolicy_vs_sb3.py --tasks dqn-cartpole --seeds 0 1 2
      python benchmarks/offpolicy_vs_sb3.py --merge a.json b.json --output all.json   (seeds run apart)
      python benchmarks/offpolicy_vs_sb3.py --smoke     (every task at a few hundred steps, 1 seed, 2 episodes)
      (writes benchmarks/results/offpolicy_vs_sb3.json unless --output says otherwise)
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EVAL_SEED = 12345
TASKS = {"dqn-cartpole": ("dqn-cartpole", 50_000, ["nimbus", "sb3"]),
         "sac-pendulum": ("sac-pendulum", 20_000, ["nimbus", "sb3"]),
         "sac-hopper": ("sac-hopper", 100_000, ["nimbus", "sb3"]),
         "impala-cartpole": ("impala-cartpole", 100_000, ["nimbus", "nimbus-impact", "sb3-ppo"])}
PPO_ZOO_CARTPOLE = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                        learning_rate=1e-3, clip_range=0.2)   # rl-zoo ppo.yml CartPole-v1, 8 envs (zoo: linear
#                                                               schedules from 1e-3 and 0.2; constants here)


def nimbus_config(*, name: str, seed: int, steps: int, out_dir: Path, impact: bool):
    from nimbus.config import load_config
    overrides = [f"seed={seed}", f"train.total_env_steps={steps}", "train.eval_episodes=0", "output.report=false",
                 "output.status_line=false", "output.loggers=[]", f"output.root_dir={out_dir}"]
    if impact:
        overrides.append("algo.variant=impact")
    return load_config(path=REPO / "configs" / f"{name}.yaml", overrides=overrides)


def run_nimbus(*, name: str, seed: int, steps: int, episodes: int, out_dir: Path, impact: bool) -> dict:
    from nimbus.roles.evaluate import evaluate_checkpoint
    from nimbus.run.loop import train
    started = time.perf_counter()
    result = train(config=nimbus_config(name=name, seed=seed, steps=steps, out_dir=out_dir, impact=impact))
    wall_s = time.perf_counter() - started
    evaluated = evaluate_checkpoint(path=result.run_dir, episodes=episodes, seed=EVAL_SEED, explore=False)
    return {"eval_return": evaluated.mean_return, "wall_s": wall_s, "env_steps": result.summary.env_steps}


def sb3_model(*, name: str, seed: int, env):
    """The SB3 model with the nimbus config's hyperparameters (same names where both have them)."""
    import stable_baselines3 as sb3
    algo = nimbus_config(name=name, seed=seed, steps=1, out_dir=Path("."), impact=False).algo
    if algo.name == "impala":
        from stable_baselines3.common.env_util import make_vec_env
        vec = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
        return sb3.PPO("MlpPolicy", vec, seed=seed, device="cpu", **PPO_ZOO_CARTPOLE)
    common = dict(learning_rate=algo.lr, batch_size=algo.batch_size, buffer_size=algo.buffer_capacity,
                  learning_starts=algo.learning_starts, gamma=algo.gamma, train_freq=algo.train_freq,
                  gradient_steps=algo.gradient_steps, policy_kwargs={"net_arch": list(algo.hidden_sizes)},
                  seed=seed, device="cpu")
    if algo.name == "dqn":
        return sb3.DQN("MlpPolicy", env, target_update_interval=algo.target_update_interval * algo.train_freq
                       // max(algo.gradient_steps, 1), exploration_fraction=algo.exploration_fraction,
                       exploration_initial_eps=algo.exploration_initial_eps,
                       exploration_final_eps=algo.exploration_final_eps, tau=algo.tau, **common)
    return sb3.SAC("MlpPolicy", env, tau=algo.tau, **common)


def run_sb3(*, name: str, seed: int, steps: int, episodes: int) -> dict:
    import gymnasium as gym
    import torch
    torch.set_num_threads(1)                     # as nimbus's learner (learner.torch_threads: 1)
    env_id = nimbus_config(name=name, seed=seed, steps=1, out_dir=Path("."), impact=False).env.id
    started = time.perf_counter()
    model = sb3_model(name=name, seed=seed, env=gym.make(env_id))
    model.learn(total_timesteps=steps)
    wall_s = time.perf_counter() - started
    env, returns = gym.make(env_id), []
    for episode in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + episode)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return {"eval_return": statistics.fmean(returns), "wall_s": wall_s, "env_steps": int(model.num_timesteps)}


def one(*, task: str, framework: str, seed: int, steps: int, episodes: int, out: Path) -> None:
    name = TASKS[task][0]
    with tempfile.TemporaryDirectory() as tmp:
        if framework.startswith("nimbus"):
            result = run_nimbus(name=name, seed=seed, steps=steps, episodes=episodes, out_dir=Path(tmp),
                                impact=framework == "nimbus-impact")
        else:
            result = run_sb3(name=name, seed=seed, steps=steps, episodes=episodes)
    out.write_text(json.dumps({"task": task, "framework": framework, "seed": seed, **result}))


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="override every task's env steps")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="every task, 1 seed, few steps, 2 episodes")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "offpolicy_vs_sb3.json")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, help="one table from these results' runs")
    parser.add_argument("--one", nargs=4, metavar=("TASK", "FRAMEWORK", "SEED", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        task, framework, seed, out = args.one
        one(task=task, framework=framework, seed=int(seed), steps=args.steps or TASKS[task][1],
            episodes=args.eval_episodes, out=Path(out))
        return
    if args.merge:
        runs = [run for path in args.merge for run in json.loads(path.read_text())["runs"]]
        args.tasks = list(dict.fromkeys(run["task"] for run in runs))
        report(runs=runs, tasks=args.tasks, output=args.output, extra={"merged": [str(p) for p in args.merge]})
        return
    if args.smoke:
        args.seeds, args.eval_episodes = [0], 2
    started, runs = time.perf_counter(), []
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            steps = 1200 if args.smoke else args.steps or TASKS[task][1]
            for seed in args.seeds:
                for framework in TASKS[task][2]:          # interleaved: same load for both frameworks
                    out = Path(tmp) / f"{task}-{framework}-{seed}.json"
                    cmd = [sys.executable, __file__, "--one", task, framework, str(seed), str(out),
                           "--steps", str(steps), "--eval-episodes", str(args.eval_episodes)]
                    subprocess.run(cmd, check=True)
                    runs.append(json.loads(out.read_text()))
                    print(f"{task} {framework} seed {seed}: eval {runs[-1]['eval_return']:.1f} "
                          f"wall {runs[-1]['wall_s']:.0f} s", flush=True)
    report(runs=runs, tasks=args.tasks, output=args.output, extra={
        "command": " ".join(sys.argv), "total_s": time.perf_counter() - started,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg_at_end": os.getloadavg()}})


def report(*, runs: list[dict], tasks: list[str], output: Path, extra: dict) -> None:
    """Write the JSON (table + runs) and print the markdown table."""
    table = {f"{task}/{fw}": {key: spread([r[key] for r in runs if (r["task"], r["framework"]) == (task, fw)])
                              for key in ("eval_return", "wall_s", "env_steps")}
             for task in tasks for fw in TASKS[task][2] if any((r["task"], r["framework"]) == (task, fw) for r in runs)}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({**extra, "table": table, "runs": runs}, indent=1))
    print("| task / framework | eval return | wall (s) | env steps |\n| --- | --- | --- | --- |")
    for key, e in table.items():
        r = e["eval_return"]
        print(f"| {key} | {r['mean']:.1f} ± {r['std']:.1f} ({r['min']:.1f}..{r['max']:.1f}) | "
              f"{e['wall_s']['mean']:.0f} | {e['env_steps']['mean']:,.0f} |")


if __name__ == "__main__":
    main()
