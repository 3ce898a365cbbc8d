"""Every function entrypoint named in the source loads as the first import of a fresh interpreter, as a Ray worker or
a spawned worker loads it (runtime/worker.py ``load_entrypoint``): a test process has imported half the package
already, which hides an import that only works after another one (nitro/config.py before nimbus.config)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nimbus

PACKAGE = Path(nimbus.__file__).resolve().parent
ENTRYPOINT = re.compile(r'"(nimbus\.[A-Za-z_.]+:[a-z_]+)"')   # a callable (lower case), not a class found by name


def entrypoints() -> list[str]:
    found = {m for path in PACKAGE.rglob("*.py") for m in ENTRYPOINT.findall(path.read_text())}
    return sorted({min(e for e in found if e.partition(":")[0] == module)
                   for module in {e.partition(":")[0] for e in found}})   # one per module


def test_the_scan_finds_every_technique_s_functions() -> None:
    modules = {e.partition(":")[0] for e in entrypoints()}
    assert {"nimbus.onpolicy.actor", "nimbus.onpolicy.learner", "nimbus.offpolicy.learner",
            "nimbus.stellaris.parameter", "nimbus.marless.value_learner"} <= modules


def test_every_function_entrypoint_loads_in_a_fresh_interpreter() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    code = "import sys; from nimbus.runtime.worker import load_entrypoint; load_entrypoint(sys.argv[1])"
    procs = {e: subprocess.Popen([sys.executable, "-c", code, e], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True) for e in entrypoints()}
    failed = {e: proc.communicate(timeout=300)[1].strip().splitlines()[-1:] for e, proc in procs.items()}
    assert {e: err for e, err in failed.items() if procs[e].returncode != 0} == {}
