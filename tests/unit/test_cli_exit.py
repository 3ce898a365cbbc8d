"""The ``nimbus`` program ends without the interpreter's teardown (cli.py ``exit_now``), and loses nothing by it:
the exit code is ``main``'s, what it printed is flushed (a pipe buffers it), atexit's handlers run, and a non-daemon
thread still running is waited for (then the exit is the plain one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# A program that prints without a newline into a pipe, registers an atexit handler and maybe starts a non-daemon
# thread that writes a file a moment later, then ends through exit_now with code 3.
_PROGRAM = """
import atexit, sys, threading, time
from pathlib import Path
from nimbus.cli import exit_now
out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
if sys.argv[2] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), (out / "thread").write_text("done"))).start()
print("x" * 100, end="")
exit_now(code=3)
"""


def _run(tmp_path: Path, *, thread: bool) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}   # stdout buffers, as a user's
    return subprocess.run([sys.executable, "-c", _PROGRAM, str(tmp_path), "thread" if thread else "-"],
                          capture_output=True, text=True, timeout=120, env=env)


def test_the_program_exits_with_mains_code_its_output_flushed_and_atexit_run(tmp_path: Path) -> None:
    done = _run(tmp_path, thread=False)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "x" * 100
    assert (tmp_path / "atexit").read_text() == "ran"


def test_a_running_non_daemon_thread_is_waited_for(tmp_path: Path) -> None:
    done = _run(tmp_path, thread=True)
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"


def test_the_console_script_ends_through_it() -> None:
    import tomllib

    scripts = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["nimbus"] == "nimbus.cli:program"
