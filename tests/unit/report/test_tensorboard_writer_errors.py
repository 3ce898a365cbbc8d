"""TensorBoard's writer thread fails (a full disk, a removed directory): the error reaches the driver's next write or
flush, where nimbus reports it (a full disk: one line, tests/integration/test_disk_full.py), and no thread traceback
is printed before it (report/trackers.py ``_quiet_event_writer_threads``); other threads' exceptions still reach the
hook that was there before."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from nimbus.report.trackers import TensorBoardTracker


@pytest.fixture
def printed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads whose exception reached the hook in place before the tracker (which prints)."""
    seen: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.thread.name))
    return seen


def test_a_failed_event_write_reaches_the_driver_without_a_thread_traceback(tmp_path: Path, printed) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tracker = TensorBoardTracker(run_dir=run_dir)
    tracker.log(scalars={"return": 1.0}, step=0)
    tracker._writer.flush()
    shutil.rmtree(run_dir)   # the thread's next append opens a file in a folder that is gone
    tracker.log(scalars={"return": 2.0}, step=1)
    with pytest.raises(FileNotFoundError):
        for _ in range(200):   # the thread fails at its next write; the driver's next call raises it
            tracker._writer.flush()
            time.sleep(0.01)
    assert printed == []


def test_other_threads_exceptions_still_reach_the_previous_hook(tmp_path: Path, printed) -> None:
    TensorBoardTracker(run_dir=tmp_path).finish(artifacts=[])
    TensorBoardTracker(run_dir=tmp_path).finish(artifacts=[])   # installed once, not wrapped twice
    thread = threading.Thread(target=lambda: 1 / 0, name="user-thread")
    thread.start()
    thread.join()
    assert printed == ["user-thread"]
