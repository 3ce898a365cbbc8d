"""PPO on Atari Qbert, frames per second: nimbus (configs/ppo-atari-qbert.yaml) vs SB3's make_atari_env PPO.

Both sides run rl-baselines3-zoo's Atari PPO: 8 envs, 128 steps per env per update (1024 rows), 4 epochs of
minibatches of 256, lr 2.5e-4, clip 0.1, ent 0.01, vf 0.5, a NatureCNN shared by policy and value, 4 stacked 84x84
grayscale frames, frame skip 4 (a frame = an emulator frame: 4 per env step), rewards clipped to their sign.

* ``sb3``: ``PPO("CnnPolicy", VecFrameStack(make_atari_env("ALE/Qbert-v5", n_envs=8,
  env_kwargs={"frameskip": 1}), 4))`` (AtariWrapper: no-ops, frame skip 4, 84x84, clipped rewards) on the CPU with
  ``--sb3-threads`` torch threads; clock = ``model.learn(steps)``. SB3's AtariWrapper also ends the training signal at
  a lost life and fires on reset; nimbus's env does neither: frames/s compares the machinery, not the learning.
* ``nimbus``: ``train()`` on configs/ppo-atari-qbert.yaml (2 actor functions x 4 envs x 128 steps, EnvPool where
  installed: ``--env-backend``), capped at ``--steps`` env steps; clock = the workflow's ``wall_s`` at the last round
  (worker start-up before round 0 excluded, as SB3's process start is). ``--overlap`` adds ``train.overlap``.

Each run is its own subprocess; sb3 and nimbus are interleaved per repeat (the machine is shared). Reported: frames/s
(4 x env steps/s) min/median/max over repeats and the ratio of the medians.

Run:  python benchmarks/ppo_atari.py [--repeats 3] [--steps 20480] [--env-backend auto] [--overlap]
      (writes benchmarks/results/ppo_atari.json; ~3 x (2 + 2) runs of a few minutes each on 2 cores)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import RunUsage, child_line, child_result, record, stats, versions, write_result

REPO = Path(__file__).resolve().parents[1]
FRAME_SKIP = 4
ARMS = ("sb3", "nimbus")


def run_sb3(*, steps: int, seed: int, threads: int) -> dict:
    import ale_py
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    torch.set_num_threads(threads)
    started = time.perf_counter()
    env = VecFrameStack(make_atari_env("ALE/Qbert-v5", n_envs=8, seed=seed, env_kwargs={"frameskip": 1}), n_stack=4)
    model = PPO("CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=2.5e-4, clip_range=0.1,
                ent_coef=0.01, vf_coef=0.5, seed=seed, device="cpu")
    learn_started = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall_s = time.perf_counter() - learn_started
    return {"env_steps": model.num_timesteps, "wall_s": wall_s, "setup_s": learn_started - started,
            "frames_per_s": FRAME_SKIP * model.num_timesteps / wall_s}


def run_nimbus(*, steps: int, seed: int, env_backend: str, overlap: bool, out_dir: Path) -> dict:
    from nimbus.config import load_config
    from nimbus.run.loop import train

    config = load_config(path=REPO / "configs" / "ppo-atari-qbert.yaml", overrides=[
        f"seed={seed}", f"train.total_env_steps={steps}", f"actors.env_backend={env_backend}",
        f"train.overlap={str(overlap).lower()}", "train.eval_episodes=0", "train.checkpoint_every_rounds=100000",
        "output.report=false", "output.status_line=false", "output.loggers=[]", f"output.root_dir={out_dir}"])
    result = train(config=config)
    rows = result.rows
    return {"env_steps": rows[-1].env_steps, "wall_s": rows[-1].wall_s,
            "frames_per_s": FRAME_SKIP * rows[-1].env_steps / rows[-1].wall_s,
            "round_s_median": statistics.median(row.round_s for row in rows),
            "sampling_s_median": statistics.median(row.sampling_s for row in rows),
            "learning_s_median": statistics.median(row.learning_s for row in rows)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20480, help="env steps per run (4 frames each)")
    parser.add_argument("--env-backend", default="auto", choices=("auto", "envpool", "gymnasium", "vector"))
    parser.add_argument("--overlap", action="store_true")
    parser.add_argument("--sb3-threads", type=int, default=1, help="torch threads for SB3 (nimbus's learner: 1)")
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "ppo_atari.json")
    parser.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "sb3":
        print(child_line(run_sb3(steps=args.steps, seed=args.seed, threads=args.sb3_threads)), flush=True)
        return 0
    if args.child == "nimbus":
        with tempfile.TemporaryDirectory(prefix="nimbus-bench-") as tmp:
            result = run_nimbus(steps=args.steps, seed=args.seed, env_backend=args.env_backend, overlap=args.overlap,
                                out_dir=Path(tmp))
        print(child_line(result), flush=True)
        return 0
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for repeat in range(args.repeats):
        for arm in ARMS:   # interleaved: both see the same machine load
            usage = RunUsage.start()
            cmd = [sys.executable, __file__, "--child", arm, "--seed", str(repeat), "--steps", str(args.steps),
                   "--env-backend", args.env_backend, "--sb3-threads", str(args.sb3_threads),
                   *(["--overlap"] if args.overlap else [])]
            runs[arm].append({**child_result(cmd=cmd, cwd=REPO, timeout_s=args.timeout_s, what=arm), **usage.fields()})
            print(f"repeat {repeat} {arm}: {runs[arm][-1]['frames_per_s']:.0f} frames/s", flush=True)
    summary = {arm: stats(run["frames_per_s"] for run in runs[arm]) for arm in ARMS}
    summary["ratio_nimbus_to_sb3"] = summary["nimbus"]["median"] / summary["sb3"]["median"]
    write_result(path=args.out, result={**record(benchmark="ppo_atari"), "versions": versions(
        modules=("torch", "gymnasium", "stable_baselines3")), "steps": args.steps, "env_backend": args.env_backend,
        "overlap": args.overlap, "summary": summary, "runs": runs})
    print(f"frames/s  sb3 {summary['sb3']['median']:.0f}  nimbus {summary['nimbus']['median']:.0f}  "
          f"ratio {summary['ratio_nimbus_to_sb3']:.2f}   wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
