"""Two runs started from one parent with NIMBUS_SHM_PREFIX set: each driver claims its own prefix under
it, so neither collides with (KeyExists on weights/main/0) nor sweeps the other's segments."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from nimbus.data.shm import list_segments

REPO = Path(__file__).resolve().parents[2]


def _train(*, root: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "nimbus.cli", "train", str(REPO / "configs" / "ppo-cartpole.yaml"),
         "--set", f"output.root_dir={root}", "--set", "train.total_env_steps=768", "--set", "output.loggers=[]",
         "--set", "output.report=false", "--set", "train.eval_episodes=0", "--set", "output.status_line=false"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_runs_from_one_parent_with_the_prefix_set_both_finish(tmp_path: Path) -> None:
    prefix = f"nimbus_twin{os.getpid()}_"
    env = {**os.environ, "NIMBUS_SHM_PREFIX": prefix}
    runs = [_train(root=tmp_path / name, env=env) for name in ("a", "b")]
    started = time.monotonic()
    outcomes = [run.communicate(timeout=240) for run in runs]
    for run, (_, err) in zip(runs, outcomes):
        assert run.returncode == 0, err[-3000:]
    assert time.monotonic() - started < 240
    for name in ("a", "b"):
        assert len([p for p in (tmp_path / name).iterdir() if (p / "summary.json").exists()]) == 1
    assert list_segments(prefix=prefix) == []  # each cleaned up its own, owner files included
