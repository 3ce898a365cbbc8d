"""A full disk ends a run with one clear line, never a traceback (RELIABILITY.md: "Disk full ... clear message";
issue 28.6). The run directory sits on a real 200 KiB tmpfs, so the first write that no longer fits fails as it
would on a full disk: the event file, the ledger or the metrics, whichever comes first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_disk(tmp_path: Path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def test_a_full_disk_ends_the_run_with_one_clear_line(small_disk: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "nimbus.cli", "train", str(REPO / "configs" / "ppo-cartpole.yaml"),
                           "--run-dir", str(small_disk / "run"), "--set", "train.total_env_steps=100000",
                           "--set", "train.target_return=null", "--set", "output.status_line=false",
                           "--set", "output.report=false"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "disk full" in proc.stderr and "No space left on device" in proc.stderr
    assert "--resume" in proc.stderr
