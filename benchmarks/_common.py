"""What the scripts in benchmarks/ share: a run in a child interpreter, the load and CPU time around it, the
min/median/max of a list of figures, the versions, and the result file that names the command and the machine.

A script measures every run in a fresh interpreter (no state carried from one run to the next): the child
prints one line ``RESULT <json>`` (``child_line``) and the parent reads it back (``child_result``)::

    from _common import RunUsage, child_result, record, stats, write_result   # beside the script

    usage = RunUsage.start()
    run = child_result(cmd=[sys.executable, __file__, "--child", "nimbus"], cwd=REPO, timeout_s=900,
                       what="nimbus seed 0")
    runs.append({**run, **usage.fields()})          # loadavg_1m_before/after, cpu_s
    write_result(path=out, result={**record(benchmark="my_bench"), "runs": runs,
                                   "summary": stats([r["wall_s"] for r in runs])})

It lives here, not in the nimbus package, and imports only the standard library (``versions`` imports the
modules it names when called): a child that runs another tree's nimbus (``--nimbus-src``, ``--variant``) or
none still finds it, and a parent stays light. ``python benchmarks/<script>.py`` puts this folder on sys.path.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULT_TAG = "RESULT"


def child_line(result: Any, *, tag: str = RESULT_TAG) -> str:
    """The line a child prints for its parent: ``<tag> <json>``."""
    return f"{tag} {json.dumps(result)}"


def child_result(*, cmd: Sequence[str], cwd: Path, timeout_s: float | None, what: str, tag: str = RESULT_TAG,
                 env: Mapping[str, str] | None = None) -> Any:
    """Run ``cmd`` and return the JSON of the last ``<tag> …`` line it printed.

    A child that exits non-zero or prints no such line raises RuntimeError naming ``what``, with the end of its
    stderr; one that outlives ``timeout_s`` raises ``subprocess.TimeoutExpired`` (the caller decides)."""
    proc = subprocess.run(list(cmd), env=None if env is None else dict(env), capture_output=True, text=True,
                          timeout=timeout_s, cwd=cwd)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(tag + " ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(tag) + 1:])


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's children that have ended (and been waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class RunUsage:
    """The machine's 1-minute load when a run started (the machine is shared) and the children's CPU seconds then."""

    load_1m_before: float
    children_cpu_s_before: float

    @classmethod
    def start(cls) -> RunUsage:
        return cls(load_1m_before=os.getloadavg()[0], children_cpu_s_before=children_cpu_s())

    def fields(self, *, cpu: bool = True) -> dict[str, float]:
        """``loadavg_1m_before``, ``loadavg_1m_after`` and (with ``cpu``) ``cpu_s``: the CPU seconds of the
        children that ended since ``start``, workers included where they were waited for."""
        out = {"loadavg_1m_before": self.load_1m_before, "loadavg_1m_after": os.getloadavg()[0]}
        if cpu:
            out["cpu_s"] = children_cpu_s() - self.children_cpu_s_before
        return out


def stats(values: Iterable[float]) -> dict[str, float]:
    """``{"min", "median", "max"}`` of ``values``."""
    values = list(values)
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def record(*, benchmark: str) -> dict[str, Any]:
    """What every result file starts with: the benchmark, the command that ran it, the machine and the time."""
    return {"benchmark": benchmark, "command": " ".join(["python"] + sys.argv),
            "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def versions(*, modules: Sequence[str]) -> dict[str, str]:
    """Python's version and each module's ``__version__`` (the module imported here, not at the top)."""
    return {"python": platform.python_version(), **{name: importlib.import_module(name).__version__
                                                    for name in modules}}


def write_result(*, path: Path, result: Mapping[str, Any], indent: int = 2) -> Path:
    """Write ``result`` as JSON to ``path`` (its folder made when missing); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=indent))
    return path


def interval_cell(entry: Mapping[str, Any] | None, fmt: str) -> str:
    """An IQM interval (nimbus.analysis.stats) as a table cell: ``IQM [low, high]``, or — where there is none."""
    if entry is None:
        return "—"
    bounds = "" if entry["low"] is None else f" [{entry['low']:{fmt}}, {entry['high']:{fmt}}]"
    return f"{entry['iqm']:{fmt}}{bounds}"
