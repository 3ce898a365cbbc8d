"""RayRuntime on one shared local Ray instance (num_cpus=2): the local backend's promises, on Ray."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.errors import FunctionFailed
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.local import LocalRuntime
from runtime_helpers import pid_alive, wait_for

pytestmark = pytest.mark.ray
HALF = Resources(cpus=0.5, memory_mb=256)


def spec(name: str, fn: str, **kwargs) -> FunctionSpec:
    kwargs.setdefault("resources", HALF)
    return FunctionSpec(name=name, entrypoint=f"nimbus.runtime.builtin:{fn}", **kwargs)


@pytest.fixture
def make_runtime(ray_local, tmp_path: Path):
    from nimbus.runtime.ray_backend import RayRuntime

    created = []

    def make(**kwargs):
        ledger = Ledger(path=tmp_path / f"ledger{len(created)}.jsonl")
        runtime = RayRuntime(ledger=ledger, address="local", **kwargs)
        created.append(runtime)
        return runtime, ledger

    yield make
    for runtime in created:
        runtime.shutdown()


def outcomes(ledger: Ledger) -> list[str]:
    return [r.outcome for r in ledger.records()]


def test_warm_worker_keeps_state_and_results_carry_the_invocation(make_runtime) -> None:
    runtime, ledger = make_runtime()
    counter = spec("counter", "counter")
    results = [runtime.invoke(spec=counter, request=Message(header={"_affinity": "a"})).result(timeout=60)
               for _ in range(3)]
    assert [r.header["calls"] for r in results] == [1, 2, 3]
    assert len({r.header["pid"] for r in results}) == 1
    assert all(r.header["_attempt"] == 1 and len(r.header["_invocation_id"]) == 32 for r in results)
    assert [r.cold for r in ledger.records()] == [True, False, False]
    assert runtime.stats().cold_starts == 1 and runtime.stats().warm_starts == 2


def test_prewarm_bills_cold_starts_once_and_first_invocations_are_warm(make_runtime) -> None:
    runtime, ledger = make_runtime()
    echo = spec("echo", "echo")
    runtime.prewarm(spec=echo, count=2, wait_s=60)
    assert runtime.stats().workers_idle == 2
    futures = runtime.map(spec=echo, requests=[Message(header={"i": i}) for i in range(2)])
    assert [f.result(timeout=30).header["i"] for f in futures] == [0, 1]
    records = ledger.records()
    assert [r.outcome for r in records[:2]] == ["prewarm", "prewarm"] and all(r.billed_s == r.init_s > 0
                                                                              for r in records[:2])
    assert [r.cold for r in records[2:]] == [False, False]


def test_timeout_kills_the_actor_bills_the_timeout_and_retries(make_runtime) -> None:
    runtime, ledger = make_runtime()
    sleepy = spec("sleepy", "sleep", timeout_s=1.0, max_retries=2)
    started = time.monotonic()
    result = runtime.invoke(spec=sleepy, request=Message(header={"attempt_seconds": [30, 0.05]})).result(timeout=60)
    assert result.header["attempt"] == 2 and time.monotonic() - started < 10
    timed_out, ok = ledger.records()
    assert (timed_out.outcome, ok.outcome) == ("timeout", "ok") and timed_out.billed_s >= 1.0
    assert timed_out.worker_id != ok.worker_id
    assert wait_for(lambda: runtime.stats().dropped_results == 1, timeout_s=10)  # the killed attempt's answer


def test_killed_worker_process_is_retried_on_another_worker(make_runtime, tmp_path: Path) -> None:
    runtime, ledger = make_runtime()
    sleepy = spec("victim", "sleep", timeout_s=30.0, max_retries=2)
    pid_path = tmp_path / "pid"
    future = runtime.invoke(spec=sleepy, request=Message(header={"attempt_seconds": [30, 0.0],
                                                                  "pid_path": str(pid_path)}))
    assert wait_for(lambda: pid_path.exists() and pid_path.read_text().strip() != "", timeout_s=30)
    victim = int(pid_path.read_text())
    os.kill(victim, signal.SIGKILL)
    result = future.result(timeout=60)
    assert result.header["attempt"] == 2 and result.header["pid"] != victim
    assert outcomes(ledger) == ["worker_died", "ok"]
    assert ledger.records()[0].error_type == "WorkerDied"


def test_errors_retry_until_spent_and_fatal_errors_stop_at_once(make_runtime) -> None:
    runtime, ledger = make_runtime()
    flaky = spec("raiser", "raise_error", max_retries=1, retry_exceptions=1)
    with pytest.raises(FunctionFailed, match="RuntimeError") as info:
        runtime.invoke(spec=flaky, request=Message(header={"error": "RuntimeError"})).result(timeout=60)
    assert info.value.attempts == 2 and "raise_error: RuntimeError on attempt 1" in info.value.traceback_text
    with pytest.raises(FunctionFailed, match="EnvContractError") as info:
        runtime.invoke(spec=flaky, request=Message(header={"error": "EnvContractError"})).result(timeout=60)
    assert info.value.attempts == 1
    assert outcomes(ledger) == ["error", "error", "error"] and runtime.stats().failed_invocations == 2


def test_keep_alive_reclaims_idle_actors(make_runtime) -> None:
    runtime, _ = make_runtime(keep_alive_s=0.5)
    pid = runtime.invoke(spec=spec("brief", "counter"), request=Message()).result(timeout=60).header["pid"]
    assert wait_for(lambda: runtime.stats().workers_alive == 0, timeout_s=10)
    assert wait_for(lambda: not pid_alive(pid), timeout_s=10)


def test_a_full_cluster_evicts_idle_workers_of_other_functions(make_runtime) -> None:
    runtime, ledger = make_runtime()
    whole = Resources(cpus=1.0, memory_mb=256)
    a, b = spec("a", "counter", resources=whole), spec("b", "counter", resources=whole)
    runtime.prewarm(spec=a, count=2, wait_s=60)  # both CPUs held by idle a-workers
    assert runtime.invoke(spec=b, request=Message()).result(timeout=60).header["calls"] == 1
    assert sorted(w["function"] for w in runtime.workers().values()) == ["a", "b"]


def test_ledger_records_have_the_local_backends_format(make_runtime, tmp_path: Path) -> None:
    runtime, ray_ledger = make_runtime()
    echo = spec("echo", "echo")
    runtime.invoke(spec=echo, request=Message()).result(timeout=60)
    local_ledger = Ledger(path=tmp_path / "local.jsonl")
    local = LocalRuntime(ledger=local_ledger, capacity_cpus=1)
    try:
        local.invoke(spec=echo, request=Message()).result(timeout=60)
    finally:
        local.shutdown()
    ray_row, local_row = (json.loads(path.read_text().splitlines()[0])
                          for path in (ray_ledger.path, local_ledger.path))
    assert list(ray_row) == list(local_row)
    assert {k: type(v) for k, v in ray_row.items()} == {k: type(v) for k, v in local_row.items()}
    assert ray_row["billed_s"] == pytest.approx(ray_row["duration_s"] + ray_row["init_s"])
    assert re.fullmatch(r"echo-\d+", ray_row["worker_id"])


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to list listening sockets")
def test_local_ray_listens_on_loopback_only(ray_local) -> None:
    """nimbus never binds a non-loopback address without an explicit setting (runtime.address)."""
    ours = _descendants(os.getpid())
    listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    mine = [line for line in listening if any(int(p) in ours for p in re.findall(r"pid=(\d+)", line))]
    assert mine, "expected Ray's servers among this process's descendants"
    for line in mine:
        address = line.split()[3].rsplit(":", 1)[0]
        assert address in ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"), line


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found.add(child)
                frontier.append(child)
    return found
