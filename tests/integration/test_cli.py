"""The installed ``nimbus`` console script, run as users run it: train, resume, eval (+ video), report, envs,
compare, bench --help, export. Exit codes: 0 success, 1 run failure, 2 bad config or usage (README). The console
script itself runs `make run`, the README example and the video evaluations; the other commands, the shared run's
training included, run nimbus.cli.main in this process (``run_cli``: what the script exits with, without an
interpreter and torch to start for each command, ~5 s each)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
NIMBUS = Path(sys.executable).parent / "nimbus"
QUIET = ["--set", "output.status_line=false"]


def nimbus(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, replace_env: bool = False,
           timeout_s: float = 240) -> subprocess.CompletedProcess:
    """The console script with this process's environment updated by ``env`` (or only ``env``: ``replace_env``)."""
    assert NIMBUS.exists(), f"the console script is not installed at {NIMBUS} (make setup)"
    return subprocess.run([str(NIMBUS), *args], capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                          env=(env or {}) if replace_env else {**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short CartPole run (normalised observations, so export must bake the statistics in), inline
    (runtime/inline.py): what these tests use is the run directory; `make run` is the last test."""
    from nimbus.cli import main

    root = tmp_path_factory.mktemp("cli")
    with contextlib.redirect_stdout(io.StringIO()) as out:   # run_cli's capsys is the function's, not the module's
        code = main(["train", str(REPO / "configs" / "ppo-cartpole.yaml"), "--run-dir", str(root / "run"), *QUIET,
                     "--set", "train.total_env_steps=2048", "--set", "train.target_return=null",
                     "--set", "train.eval_episodes=2", "--set", "algo.normalize_obs=true",
                     "--set", "runtime.backend=inline"])
    assert code == 0, out.getvalue()[-3000:]
    assert f"run directory: {root / 'run'}" in out.getvalue().replace("\n", "")
    return root / "run"


def test_train_completes_and_writes_every_run_directory_file(run_dir: Path) -> None:
    for name in ("config.yaml", "metrics.jsonl", "ledger.jsonl", "report.png", "summary.json"):
        assert (run_dir / name).is_file(), name
    assert list(run_dir.glob("events.out.tfevents.*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "total_env_steps" and summary["env_steps"] == 2048
    assert summary["eval_return"] is not None
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 8   # 2048 / 256 steps a round
    newest = sorted((run_dir / "checkpoints").glob("ckpt-*"))[-1]
    assert {p.name for p in newest.iterdir()} == {"weights.safetensors", "optimizer.safetensors", "manifest.json"}


def test_resume_continues_the_run_in_place(run_dir: Path, tmp_path: Path, run_cli) -> None:
    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    code, said = run_cli("train", "--resume", str(resumed), *QUIET, "--set", "train.total_env_steps=3072",
                         "--set", "train.eval_episodes=0")
    assert code == 0, said[-3000:]
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["env_steps"] == 3072 and summary["rounds"] == 12
    rounds = [json.loads(line)["round"] for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert rounds == list(range(12))


def test_eval_report_envs_compare_and_bench_help(run_dir: Path, tmp_path: Path, run_cli) -> None:
    code, said = run_cli("eval", str(run_dir), "--episodes", "2", "--deterministic")
    assert code == 0 and re.search(r"policy_version 8: mean return [\d.]+ ± [\d.]+ over 2 episodes", said), said
    (run_dir / "report.png").unlink()
    code, said = run_cli("report", str(run_dir))
    assert code == 0 and (run_dir / "report.png").is_file(), said
    code, said = run_cli("envs")
    assert code == 0 and re.search(r"CartPole-v1 .* tested", said), said
    assert "Acrobot" in said and "MountainCar-v0" not in said   # tested ones only
    code, said = run_cli("envs", "--all")
    assert re.search(r"MountainCar-v0 .*│ -\s*│", said), said   # every id, untested ones unmarked
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    code, said = run_cli("compare", str(run_dir), str(other), "--output", str(tmp_path / "cmp.png"))
    assert code == 0 and (tmp_path / "cmp.png").is_file(), said
    code, said = run_cli("bench", "--help")
    assert code == 0 and "transfer" in said and "sample" in said


def test_usage_errors_exit_2(run_dir: Path, tmp_path: Path, run_cli) -> None:
    assert run_cli("eval")[0] == 2                                          # argparse: missing RUN_DIR
    assert run_cli("export", str(run_dir), "--format", "tflite")[0] == 2
    code, said = run_cli("train", str(REPO / "configs" / "ppo-cartpole.yaml"), "--set", "env.id=NoSuchEnv-v0",
                         "--set", f"output.root_dir={tmp_path}")
    assert code == 2 and "unknown env id 'NoSuchEnv-v0'" in said, said


EXPORTED = textwrap.dedent('''
    import json, sys
    import gymnasium as gym
    import numpy as np
    if sys.argv[3] == "onnx":
        import onnxruntime
        session = onnxruntime.InferenceSession(sys.argv[1])
        policy = lambda obs: session.run(["action"], {"obs": obs})[0]
    else:
        import torch
        module = torch.jit.load(sys.argv[1])
        policy = lambda obs: module(torch.as_tensor(obs)).numpy()
    env = gym.make("CartPole-v1")
    observations, actions, returns = [], [], []
    for episode in range(3):
        obs, _ = env.reset(seed=12345 + episode)
        total, done = 0.0, False
        while not done:
            action = int(policy(obs[None])[0])
            observations.append(obs)
            actions.append(action)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    assert not any(name == "nimbus" or name.startswith("nimbus.") for name in sys.modules), "nimbus imported"
    np.savez(sys.argv[2], obs=np.array(observations), actions=np.array(actions))
    print(json.dumps({"mean": float(np.mean(returns)), "std": float(np.std(returns))}))
''')


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_export_runs_without_nimbus_and_acts_as_eval(run_dir: Path, tmp_path: Path, fmt: str, run_cli) -> None:
    if fmt == "onnx":
        pytest.importorskip("onnxruntime", reason="the onnx extra (pip install nimbus-rl[onnx])")
    code, said = run_cli("export", str(run_dir), "--format", fmt)
    assert code == 0, said
    policy = run_dir / "export" / ("policy.onnx" if fmt == "onnx" else "policy.pt")
    assert policy.is_file()
    out = subprocess.run([sys.executable, "-c", EXPORTED, str(policy), str(tmp_path / "rollout.npz"), fmt],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    exported = json.loads(out.stdout)
    # the same episodes under `nimbus eval --deterministic` (same seeds): the same returns
    code, said = run_cli("eval", str(run_dir), "--episodes", "3", "--deterministic", "--seed", "12345")
    assert code == 0 and f"mean return {exported['mean']:.2f} ± {exported['std']:.2f} over 3 episodes" in said, \
        (said, exported)
    # and, observation by observation, eval's own policy picks the exported policy's actions
    from nimbus.config import parse_config
    from nimbus.data.checkpoint import load_checkpoint
    from nimbus.envs.spaces import EnvSpaces
    from nimbus.policy.build import probe_spaces
    from nimbus.roles.evaluate import load_policy

    state = load_checkpoint(path=run_dir)
    config = parse_config(data=state.config)
    assert config.algo.normalize_obs
    spaces: EnvSpaces = probe_spaces(config=config)
    rollout = np.load(tmp_path / "rollout.npz")
    eval_actions = load_policy(config=config, weights=state.weights, spaces=spaces).actions(
        obs=rollout["obs"], explore=False)
    np.testing.assert_array_equal(eval_actions, rollout["actions"])


def test_eval_video_records_episodes_without_a_display_or_an_sdl_complaint(run_dir: Path) -> None:
    """On a machine without a display the frames are drawn off-screen: the videos, and no SDL "XDG_RUNTIME_DIR"
    complaint on stderr (it read as an error before a success)."""
    pytest.importorskip("moviepy", reason="the video extra (pip install nimbus-rl[video])")
    pytest.importorskip("pygame", reason="the video extra (pip install nimbus-rl[video])")
    headless = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "DISPLAY")}
    proc = nimbus("eval", str(run_dir), "--episodes", "2", "--video", env=headless, replace_env=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (run_dir / "videos").glob("*.mp4")) == ["eval-episode-0.mp4", "eval-episode-1.mp4"]
    assert "no video" not in proc.stderr and "XDG_RUNTIME_DIR" not in proc.stderr, proc.stderr[-3000:]
    assert "videos:" in proc.stdout


def test_eval_video_without_gl_warns_once_and_evaluates(tmp_path: Path) -> None:
    """A headless machine without GL (MuJoCo through GLFW, no display): one warning, no video, results as usual."""
    pytest.importorskip("mujoco", reason="the mujoco extra")
    from nimbus.algos.registry import make_algorithm
    from nimbus.config import parse_config
    from nimbus.data.checkpoint import Checkpointer, CheckpointState
    from nimbus.models.weights import model_to_message
    from nimbus.policy.build import probe_spaces

    run = tmp_path / "hopper"
    config = parse_config(data={"env": {"id": "Hopper-v5"}, "algo": {"name": "ppo"}})
    model = make_algorithm(config=config.algo).make_model(spaces=probe_spaces(config=config))
    Checkpointer(directory=run / "checkpoints").save(state=CheckpointState(
        weights=model_to_message(model=model, version=0), optimizer=None, policy_version=0, round=0,
        env_steps=0, episodes=0, config=config.model_dump(mode="json")))
    env = {"MUJOCO_GL": "glfw", "DISPLAY": "", "WAYLAND_DISPLAY": ""}
    proc = nimbus("eval", str(run), "--episodes", "2", "--video", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("no video") == 1 and "over 2 episodes" in proc.stdout.replace("\n", " ")
    assert not list(run.glob("videos/*.mp4"))


def test_the_readme_custom_env_example_trains_as_shown(tmp_path: Path) -> None:
    """README: `cd examples && nimbus train corridor.yaml` (module:EnvId + FlattenObservation) reaches its target."""
    proc = nimbus("train", "corridor.yaml", "--run-dir", str(tmp_path / "run"), *QUIET, "--set", "output.report=false",
                  cwd=REPO / "examples")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stopped_by"] == "target_return" and summary["final_return"] >= 0.5


@pytest.mark.slow
def test_make_run_stops_once_cartpole_is_solved(tmp_path: Path) -> None:
    """`make run`: the shipped config stops at a 100-episode mean of 475, then evaluates the final policy. Inline
    (runtime/inline.py): the subject is the shipped config's learning, and the console script; the forked pool's
    rounds are the same workflow's (test_ppo_cartpole.py's determinism). Measured side by side at load 12-16: 147 s
    on the local backend, 79 s inline (both stop at 475.6-475.7 near 80k env steps)."""
    proc = nimbus("train", str(REPO / "configs" / "ppo-cartpole.yaml"), "--run-dir", str(tmp_path / "run"), *QUIET,
                  "--set", "runtime.backend=inline", timeout_s=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stopped_by"] == "target_return" and summary["final_return"] >= 475
    assert summary["env_steps"] < 100_000 and summary["eval_return"] is not None
