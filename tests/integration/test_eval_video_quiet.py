"""``nimbus eval --video`` on a machine without a display records its videos without SDL's "XDG_RUNTIME_DIR"
complaint on stderr (frames are drawn off-screen; the message read as an error before a success)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[2]


def test_eval_video_says_no_sdl_error(make_config, tmp_path: Path) -> None:
    pytest.importorskip("pygame", reason="CartPole's frames need the video extra")
    run = train(config=make_config(overrides=["runtime.backend=inline", "train.max_rounds=1",
                                              "train.eval_episodes=0"]), run_dir=tmp_path / "run")
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "DISPLAY")}
    proc = subprocess.run([sys.executable, "-m", "nimbus.cli", "eval", str(run.run_dir), "--video", "--episodes", "1"],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "XDG_RUNTIME_DIR" not in proc.stderr and "videos:" in proc.stdout, proc.stderr[-2000:]
