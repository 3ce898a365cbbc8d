"""run/rundir.py: the run directory's lock is held by one process, named in the refusal, and released by the OS
when its holder dies (SIGKILL included); a new run never takes a directory that holds files (#28.4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nimbus.run.rundir import RunDirError, claim_run_dir

HOLD = """
import sys, time
from pathlib import Path
from nimbus.run.rundir import claim_run_dir
with claim_run_dir(run_dir=Path(sys.argv[1]), resuming=True):
    print("held", flush=True)
    time.sleep(600)
"""


def test_the_lock_names_its_holder_and_dies_with_it(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirError, match=rf"in use by another nimbus process \(pid {holder.pid}\)"):
            with claim_run_dir(run_dir=tmp_path, resuming=True):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with claim_run_dir(run_dir=tmp_path, resuming=True):   # a killed holder leaves no stale lock
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())


def test_a_new_run_refuses_a_directory_that_holds_files(tmp_path: Path) -> None:
    with claim_run_dir(run_dir=tmp_path / "new", resuming=False):   # absent: created
        (tmp_path / "new" / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(RunDirError, match=r"already holds a run \(metrics.jsonl\).*--resume"):
        with claim_run_dir(run_dir=tmp_path / "new", resuming=False):
            pass
    with claim_run_dir(run_dir=tmp_path / "new", resuming=True):   # its own resume may
        pass


def test_a_resume_cuts_torn_tails_of_every_jsonl_file(tmp_path: Path) -> None:
    (tmp_path / "policies" / "a").mkdir(parents=True)
    for path in (tmp_path / "metrics.jsonl", tmp_path / "policies" / "a" / "metrics.jsonl"):
        path.write_text('{"round": 0}\n{"rou')
    with claim_run_dir(run_dir=tmp_path, resuming=True):
        pass
    assert (tmp_path / "metrics.jsonl").read_text() == '{"round": 0}\n'
    assert (tmp_path / "policies" / "a" / "metrics.jsonl").read_text() == '{"round": 0}\n'
