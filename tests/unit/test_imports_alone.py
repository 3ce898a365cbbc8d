"""Every module under src/nimbus imports alone: as the first nimbus import of a fresh interpreter.

An import circle shows itself only to whoever enters it at the wrong module: ``import nimbus.stellaris.config``
failed with "partially initialized module" in a fresh process while every test that had imported ``nimbus.config``
first passed. Here each module is the first nimbus import of its own process. A process per module pays the
interpreter's and torch's start-up each time (about 1.5 s, minutes for the package), so one server process imports
the third-party libraries the package uses, and no nimbus module, then forks a child per module: each child starts
with no nimbus module loaded and the heavy imports already paid.

Run as a script (``python tests/unit/test_imports_alone.py nimbus.core nimbus.config ...``) it is that server: it
prints a JSON object, module → error, for the modules that failed.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Imported by the server before it forks (each only if installed): the third-party modules nimbus modules import at
# module level, never nimbus. Each saves its import time in every child that needs it (ray's second, torch's two).
# pydantic loads its model machinery (pydantic.main and ~30 submodules) on first use, not on ``import pydantic``.
PRELOAD = ("numpy", "torch", "gymnasium", "pydantic", "pydantic.main", "annotated_types", "threadpoolctl", "yaml",
           "lz4.frame", "rich.console", "scipy.stats", "matplotlib.pyplot", "pettingzoo", "ray", "redis")
MISSING = "nimbus.no_such_module"   # reported failed on every run, so the test proves it can see a failure


def package_modules() -> list[str]:
    """Every module under src/nimbus, packages by their dotted name, found without importing any."""
    spec = importlib.util.find_spec("nimbus")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = ["nimbus", *path.relative_to(package).with_suffix("").parts]
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _import_in_child(*, name: str, report: int) -> None:
    """In the forked child: import ``name``, write the error (if any) to ``report``, exit without cleanup."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    code = 0
    try:
        importlib.import_module(name)
    except BaseException as error:   # SystemExit and KeyboardInterrupt at import time are failures too
        os.write(report, f"{type(error).__name__}: {error}".encode()[:4000])   # under a pipe's buffer: no wait
        code = 1
    os._exit(code)


def _build_a_model_like_nimbus_config() -> None:
    """Define one pydantic model with nimbus's config options (schema/base.py), so pydantic's first-model work (its
    plugins looked up among the installed distributions, lazily built schema parts) is done once, here, instead of in
    each of the ~120 children that load nimbus.config: about 0.1 CPU-second each. Nothing of nimbus is imported."""
    import pydantic

    class _Warm(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
        steps: int = pydantic.Field(default=1, gt=0)
        """a field with a docstring and a bound"""

        @pydantic.model_validator(mode="before")
        @classmethod
        def _same(cls, data: object) -> object:
            return data

    _Warm(steps=2)


def import_each(*, names: list[str], parallel: int) -> dict[str, str]:
    """Module → error for each of ``names`` that fails to import as its process's first nimbus import; ``parallel``
    children at a time, each forked from this process (which must hold no nimbus module)."""
    for library in PRELOAD:
        if importlib.util.find_spec(library.split(".")[0]) is not None:
            importlib.import_module(library)
    if importlib.util.find_spec("pydantic") is not None:
        _build_a_model_like_nimbus_config()
    loaded = [m for m in sys.modules if m == "nimbus" or m.startswith("nimbus.")]
    assert loaded == [], f"the server imported nimbus modules before forking: {loaded}"
    sys.stdout.flush()
    sys.stderr.flush()
    pending, running, failures = list(reversed(names)), {}, {}
    while pending or running:
        while pending and len(running) < parallel:
            name = pending.pop()
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_end)
                _import_in_child(name=name, report=write_end)
            os.close(write_end)
            running[pid] = (name, read_end)
        pid, status = os.wait()
        name, read_end = running.pop(pid)
        with os.fdopen(read_end, "rb") as report:
            message = report.read().decode(errors="replace")
        if status != 0:
            failures[name] = message or f"exit status {os.waitstatus_to_exitcode(status)}"
    return failures


@pytest.mark.slow   # ~30 CPU-seconds (~15 s on 2 idle cores); test_architecture.py finds circles statically in 3 s
def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    names = package_modules()
    assert len(names) > 200 and "nimbus.stellaris.config" in names
    package_root = str(Path(importlib.util.find_spec("nimbus").origin).parents[1])   # src/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]),
           "MPLBACKEND": "Agg"}   # as report/render.py chooses: pyplot preloaded with no display
    done = subprocess.run([sys.executable, __file__, *names, MISSING], capture_output=True, text=True, env=env,
                          timeout=240, check=True)
    failures = json.loads(done.stdout)
    assert failures.pop(MISSING, "").startswith("ModuleNotFoundError"), "a failed import went unreported"
    assert failures == {}, "modules that do not import alone (the first nimbus import of a process):\n" + "\n".join(
        f"  {name}: {error}" for name, error in sorted(failures.items()))


if __name__ == "__main__":
    print(json.dumps(import_each(names=sys.argv[1:], parallel=os.cpu_count() or 1)))
