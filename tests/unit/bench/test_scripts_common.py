"""benchmarks/_common.py, what the benchmark scripts share: the child's ``RESULT`` line read back, a failing
child named with its stderr, the load and CPU seconds around a run, min/median/max, the result file's head."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def common():
    """Imported as a script imports it: its folder on sys.path (``python benchmarks/<script>.py`` puts it there)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("_common")
    finally:
        sys.path.remove(str(BENCHMARKS))


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_child_result_reads_the_last_result_line(common, tmp_path: Path) -> None:
    line = common.child_line({"seed": 2, "wall_s": 1.5})
    assert line == 'RESULT {"seed": 2, "wall_s": 1.5}'
    code = f"print('noise'); print('RESULT {{\"seed\": 1}}'); print({line!r})"
    assert common.child_result(cmd=_child(code), cwd=tmp_path, timeout_s=60, what="x") == {"seed": 2, "wall_s": 1.5}
    tagged = common.child_line([1, 2], tag="ROWS")
    assert common.child_result(cmd=_child(f"print({tagged!r})"), cwd=tmp_path, timeout_s=60, what="x",
                               tag="ROWS") == [1, 2]


def test_a_failing_or_silent_child_is_named_with_its_stderr(common, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"(?s)nimbus seed 3 failed \(exit 4\):.*boom"):
        common.child_result(cmd=_child("import sys; print('RESULT {}'); sys.stderr.write('boom'); sys.exit(4)"),
                            cwd=tmp_path, timeout_s=60, what="nimbus seed 3")
    with pytest.raises(RuntimeError, match=r"silent failed \(exit 0\)"):
        common.child_result(cmd=_child("print('RESULTS {}')"), cwd=tmp_path, timeout_s=60, what="silent")
    with pytest.raises(subprocess.TimeoutExpired):
        common.child_result(cmd=_child("import time; time.sleep(30)"), cwd=tmp_path, timeout_s=0.5, what="slow")


def test_run_usage_counts_the_cpu_seconds_of_children_that_ended(common, tmp_path: Path) -> None:
    usage = common.RunUsage.start()
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\nprint('RESULT 1')"
    common.child_result(cmd=_child(busy), cwd=tmp_path, timeout_s=60, what="busy")
    fields = usage.fields()
    assert set(fields) == {"loadavg_1m_before", "loadavg_1m_after", "cpu_s"}
    assert fields["cpu_s"] >= 0.25
    assert set(usage.fields(cpu=False)) == {"loadavg_1m_before", "loadavg_1m_after"}


def test_stats_record_versions_and_the_result_file(common, tmp_path: Path) -> None:
    assert common.stats(v for v in (3.0, 1.0, 2.0, 10.0)) == {"min": 1.0, "median": 2.5, "max": 10.0}
    head = common.record(benchmark="demo")
    assert list(head) == ["benchmark", "command", "machine", "timestamp"]
    assert head["benchmark"] == "demo" and head["command"].startswith("python ") and head["machine"]["cpus"] >= 1
    assert head["machine"]["python"] == sys.version.split()[0]
    assert common.versions(modules=("json",)) == {"python": sys.version.split()[0], "json": json.__version__}
    out = common.write_result(path=tmp_path / "deep" / "r.json", result={**head, "runs": [1]})
    assert out == tmp_path / "deep" / "r.json" and json.loads(out.read_text())["runs"] == [1]
