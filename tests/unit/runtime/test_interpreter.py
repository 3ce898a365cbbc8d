"""P11: no child the runtime starts (spawned worker, fork server and its workers, janitor) imports from the
directory the driver runs in (runtime/interpreter.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.interpreter import bootstrap_command, module_command

INTROSPECT = FunctionSpec(name="introspect", entrypoint="nimbus.runtime.builtin:introspect", timeout_s=30.0)
PLANTED = ("secrets", "argparse")  # argparse: every child's main() imports it; secrets: the review's plant


def _plant(directory: Path, marker: Path) -> None:
    for name in PLANTED:
        (directory / f"{name}.py").write_text(
            f"import os\nopen({str(marker)!r} + '_' + str(os.getpid()), 'w').write({name!r})\n")


def _markers(marker: Path) -> list[str]:
    return sorted(p.name for p in marker.parent.glob(marker.name + "_*"))


@pytest.fixture
def planted_cwd(tmp_path: Path, monkeypatch) -> Path:
    cwd, marker = tmp_path / "cwd", tmp_path / "out" / "ran"
    cwd.mkdir()
    marker.parent.mkdir()
    _plant(cwd, marker)
    monkeypatch.chdir(cwd)
    # the plant is real: a plain ``python -m`` of a runtime module from this directory runs it
    subprocess.run([sys.executable, "-m", "nimbus.runtime.janitor", "--help"], capture_output=True, timeout=60)
    assert _markers(marker), "the planted module was not imported by python -m: the test proves nothing"
    for path in marker.parent.iterdir():
        path.unlink()
    return marker


@pytest.mark.parametrize("start_method", ["spawn", "fork_server"])
def test_children_never_import_a_module_planted_in_the_working_directory(make_runtime, planted_cwd: Path,
                                                                         start_method: str) -> None:
    runtime, _ = make_runtime(start_method=start_method)
    future = runtime.invoke(spec=INTROSPECT, request=Message())
    future.exception(timeout=60)  # a child that imported the planted argparse cannot start: markers first
    runtime.shutdown()  # the janitor is told to quit: it has run its main() by now
    assert _markers(planted_cwd) == []
    assert future.result().header["pid"] != os.getpid() and runtime._pool.janitor_pid > 0


def test_the_python_3_10_bootstrap_drops_the_working_directory_and_keeps_pythonpath(planted_cwd: Path,
                                                                                   tmp_path: Path) -> None:
    """The form used where ``-P`` does not exist, checked on this interpreter too."""
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "nimbus_probe_mod.py").write_text("import sys, json\nprint(json.dumps(sys.path))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(extra), os.environ.get("PYTHONPATH")])))
    for argv in (bootstrap_command(module="nimbus_probe_mod"), module_command(module="nimbus_probe_mod")):
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
        assert str(extra) in out and '""' not in out and str(Path.cwd()) not in out, out
    assert _markers(planted_cwd) == []
