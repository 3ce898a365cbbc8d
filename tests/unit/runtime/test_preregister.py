"""Pre-registered workers (ARTOS 4.3): started, then stopped (SIGSTOP) until work needs them; woken
before any cold start; billed their start only."""

from __future__ import annotations

import time
from pathlib import Path

from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec

COUNTER = FunctionSpec(name="counter", entrypoint="nimbus.runtime.builtin:counter", timeout_s=20)


def _state_and_cpu_ticks(pid: int) -> tuple[str, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[11]) + int(fields[12])  # state, utime + stime


def test_preregistered_workers_sleep_stopped_and_are_woken_before_a_cold_start(make_runtime) -> None:
    runtime, ledger = make_runtime()
    runtime.preregister(spec=COUNTER, count=2, wait_s=30)
    stats = runtime.stats()
    assert (stats.workers_asleep, stats.workers_idle, stats.workers_alive) == (2, 0, 2)
    sleepers = {w.worker_id: w.handle.pid for w in runtime._pool.slots.values()}
    time.sleep(0.2)  # SIGSTOP is delivered asynchronously
    before = {pid: _state_and_cpu_ticks(pid) for pid in sleepers.values()}
    time.sleep(0.5)
    after = {pid: _state_and_cpu_ticks(pid) for pid in sleepers.values()}
    assert after == before and {state for state, _ in after.values()} == {"T"}, (before, after)
    assert [r.outcome for r in ledger.records()] == ["prewarm", "prewarm"]  # their start, nothing while asleep
    header = runtime.invoke(spec=COUNTER, request=Message()).result(timeout=20).header
    assert header["worker_id"] in sleepers and header["calls"] == 1
    served = ledger.records()[-1]
    assert served.outcome == "ok" and not served.cold and runtime.stats().cold_starts == 2
    assert _state_and_cpu_ticks(sleepers[header["worker_id"]])[0] != "T"
    (other,) = set(sleepers) - {header["worker_id"]}
    assert _state_and_cpu_ticks(sleepers[other])[0] == "T" and runtime.stats().workers_asleep == 1


def test_a_sleeping_worker_is_killed_at_shutdown(make_runtime) -> None:
    runtime, _ = make_runtime()
    runtime.preregister(spec=COUNTER, count=1, wait_s=30)
    (pid,) = [w.handle.pid for w in runtime._pool.slots.values()]
    runtime.shutdown()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and _state_and_cpu_ticks(pid)[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists() or _state_and_cpu_ticks(pid)[0] == "Z"


def test_preregister_on_ray_is_refused_naming_the_key() -> None:
    import pytest

    from nimbus.config import parse_config
    from nimbus.errors import ConfigError

    with pytest.raises(ConfigError, match="actors.preregister needs runtime.backend: local"):
        parse_config(data={"env": {"id": "CartPole-v1"}, "algo": {"name": "ppo"}, "actors": {"preregister": 2},
                           "runtime": {"backend": "ray"}, "store": {"backend": "redis"}})
