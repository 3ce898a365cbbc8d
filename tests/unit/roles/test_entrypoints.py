"""Every function entrypoint named in the source loads as the first import of nimbus in a fresh interpreter, as a Ray
worker or a spawned worker loads it (runtime/worker.py ``load_entrypoint``): a test process has imported half the
package already, which hides an import that only works after another one (nitro/config.py before nimbus.config).
One interpreter imports what the fork server preloads (numpy, torch, gymnasium; never nimbus) and forks a child
per entrypoint, so torch is imported once, not once per entrypoint."""

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


LOAD_EACH = """
import os, sys, traceback
import gymnasium, numpy, torch   # the fork server's preload (runtime/forkserver.py); nothing of nimbus
import pydantic   # and pydantic's first model built once here, not in each child (every entrypoint loads the config)
class Warm(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, strict=True)
    steps: int = pydantic.Field(default=1, gt=0)
    '''a field with a docstring'''
assert not any(name == "nimbus" or name.startswith("nimbus.") for name in sys.modules)
for entrypoint in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:   # nimbus's first import in this process is the entrypoint's
        try:
            from nimbus.runtime.worker import load_entrypoint
            load_entrypoint(entrypoint)
        except BaseException:
            print(entrypoint, traceback.format_exc().strip().splitlines()[-1], file=sys.stderr, flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(entrypoint, "ok" if status == 0 else "failed", flush=True)
"""


def test_every_function_entrypoint_loads_in_a_fresh_interpreter() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", LOAD_EACH, *entrypoints()], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [word for e in entrypoints() for word in (e, "ok")], done.stderr[-3000:]
