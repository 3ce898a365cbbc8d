"""The pool of several workloads (run/build.py ``pool_config``): sized from the workloads, and on the simulated
backend never from this machine's CPU count (a simulated run must repeat bitwise on any machine)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_inline_workflows import inline_config  # the same directory (pytest puts it on sys.path)

from nimbus.run.build import pool_config


@pytest.mark.parametrize(("backend", "expected_64", "expected_2"), [("simulated", 6, 6), ("local", 128, 6)])
def test_the_pool_keeps_every_workloads_workers_and_simulated_ignores_this_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, expected_64: int, expected_2: int) -> None:
    configs = [inline_config(name="ppo-cartpole", run_root=tmp_path, overrides=[
        f"name={name}", f"runtime.backend={backend}", "runtime.max_workers=null"]) for name in ("a", "b")]
    found = []
    for cpus in (64, 2):
        monkeypatch.setattr("os.cpu_count", lambda cpus=cpus: cpus)
        found.append(pool_config(configs=configs).runtime.max_workers)
    assert found == [expected_64, expected_2]   # 2 workloads x (2 actors + 1 learner) = 6
