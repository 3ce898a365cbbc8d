"""A full disk ends a run with one clear line, never a traceback and never a wait (RELIABILITY.md: "Disk full ...
clear message"). The run directory sits on a real small tmpfs, so the first write that no longer fits fails as it
would on a full disk: the event file, the ledger or the metrics, whichever comes first. With the checkpoints far
apart and no tracker, the ledger (written on the runtime's receiver thread, not the driver's) is what fills it; with
TensorBoard, its event file competes. Every case must exit 1 within a deadline, with the one "disk full" line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 120   # a run that fills ~100-300 KiB at a few rounds a second; a hang is caught by the subprocess timeout
QUICK_ROUNDS = ["--set", "train.checkpoint_every_rounds=100000", "--set", "algo.num_epochs=1"]   # fills in ~50 rounds


def mount_small(*, mount_point: Path, size_kib: int) -> None:
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path: Path):
    mounts: list[Path] = []

    def make(size_kib: int) -> Path:
        mount_point = tmp_path / f"small{len(mounts)}"
        mount_small(mount_point=mount_point, size_kib=size_kib)
        mounts.append(mount_point)
        return mount_point

    yield make
    for mount_point in mounts:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def train_until_full(*, disk: Path, extra: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "nimbus.cli", "train", str(REPO / "configs" / "ppo-cartpole.yaml"),
               "--run-dir", str(disk / "run"), "--set", "train.total_env_steps=1000000",
               "--set", "train.target_return=null", "--set", "output.status_line=false",
               "--set", "output.report=false", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE_S, cwd=REPO)


def assert_one_clear_line(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "No space left on device" in proc.stderr and "disk full" in proc.stderr, proc.stderr[-3000:]
    assert "on_message failed" not in proc.stderr


def test_a_full_disk_ends_the_run_with_one_clear_line(small_disk) -> None:
    # checkpoints as shipped, one epoch a round: the disk fills in fewer seconds of learning
    proc = train_until_full(disk=small_disk(200),
                            extra=["--set", "train.total_env_steps=100000", "--set", "algo.num_epochs=1"])
    assert_one_clear_line(proc)
    assert "--resume" in proc.stderr


@pytest.mark.parametrize("size_kib", [200, 330])
def test_a_ledger_that_fills_the_disk_ends_the_run_promptly(small_disk, size_kib: int) -> None:
    """No tracker and no checkpoint before the end: the ledger's append (on the runtime's receiver thread) is the
    first write that fails; the driver used to wait forever for the result it was recording."""
    started = time.monotonic()
    proc = train_until_full(disk=small_disk(size_kib), extra=["--set", "output.loggers=[]", *QUICK_ROUNDS])
    assert_one_clear_line(proc)
    assert time.monotonic() - started < DEADLINE_S


def test_a_tracker_that_fills_the_disk_ends_the_run(small_disk) -> None:
    """TensorBoard's event file on the same full disk: the run stops (it does not drop the tracker and go on)."""
    proc = train_until_full(disk=small_disk(250), extra=["--set", "output.loggers=[tensorboard]", *QUICK_ROUNDS])
    assert_one_clear_line(proc)
