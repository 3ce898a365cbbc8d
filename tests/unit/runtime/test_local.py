"""LocalRuntime: warm pools, capacity, retries (P1), exactly-once acceptance (P2), errors (P3),
timeouts (P6), worker deaths, and no leaked segments."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import time
from concurrent.futures import CancelledError
from pathlib import Path

import numpy as np
import pytest

from nimbus.data.channel import Inbox, Outbox, body_segment_prefix
from nimbus.data.codec import Message
from nimbus.data.shm import Segment, list_segments, run_prefix
from nimbus.errors import FunctionFailed
from nimbus.runtime.base import FunctionSpec, Resources
from runtime_helpers import pid_alive, wait_for

B = "nimbus.runtime.builtin:"


def spec(name: str, *, timeout_s: float = 10.0, max_retries: int = 3, cpus: float = 1.0, fn: str | None = None,
         kind: str = "actor", retry_exceptions: int = 0) -> FunctionSpec:
    return FunctionSpec(name=name, entrypoint=B + (fn or name), resources=Resources(cpus=cpus), timeout_s=timeout_s,
                        max_retries=max_retries, kind=kind, retry_exceptions=retry_exceptions)


def written_pid(path: Path, *, timeout_s: float) -> int:
    """The pid the ``sleep`` builtin writes to ``path`` once it holds one: ``write_text`` creates the file before it
    writes, so a worker preempted in between leaves it empty for a while (``exists`` alone is not enough)."""
    assert wait_for(lambda: path.exists() and path.read_text().strip() != "", timeout_s=timeout_s)
    return int(path.read_text())


def rows_of(ledger, future_or_id) -> list:
    return sorted((r for r in ledger.records() if r.invocation_id == future_or_id), key=lambda r: r.attempt)


def test_second_invocation_is_warm_and_keeps_the_cache(make_runtime) -> None:
    runtime, ledger = make_runtime()
    counter = spec("counter")
    first = runtime.invoke(spec=counter, request=Message()).result(timeout=20)
    second = runtime.invoke(spec=counter, request=Message()).result(timeout=20)
    assert (first.header["calls"], second.header["calls"]) == (1, 2)
    assert first.header["worker_id"] == second.header["worker_id"]
    cold, warm = ledger.records()
    assert cold.cold and cold.init_s > 0 and cold.billed_s >= cold.init_s
    assert not warm.cold and warm.init_s == 0 and warm.billed_s == pytest.approx(warm.duration_s)
    assert runtime.stats().cold_starts == 1 and runtime.stats().warm_starts == 1


def test_workers_stay_light_and_get_the_run_environment(make_runtime) -> None:
    runtime, _ = make_runtime()
    header = runtime.invoke(spec=spec("introspect", cpus=2), request=Message()).result(timeout=20).header
    assert header["torch_loaded"] is False  # the worker itself never imports torch
    assert header["omp_num_threads"] == "2" and header["shm_prefix"] == run_prefix()


def test_keep_alive_reclaims_an_idle_worker(make_runtime) -> None:
    runtime, _ = make_runtime(keep_alive_s=0.3)
    pid = runtime.invoke(spec=spec("counter"), request=Message()).result(timeout=20).header["pid"]
    assert wait_for(lambda: runtime.stats().workers_alive == 0, timeout_s=5)
    assert wait_for(lambda: not pid_alive(pid), timeout_s=5)


def test_prewarmed_workers_serve_warm_first_invocations(make_runtime) -> None:
    runtime, ledger = make_runtime()
    counter = spec("counter")
    runtime.prewarm(spec=counter, count=2, wait_s=30)
    assert runtime.stats().workers_idle == 2
    prewarms = ledger.records()
    assert [r.outcome for r in prewarms] == ["prewarm", "prewarm"]
    assert all(r.cold and r.billed_s == r.init_s > 0 for r in prewarms)
    futures = runtime.map(spec=counter, requests=[Message(), Message()])
    results = [f.result(timeout=20) for f in futures]
    assert {r.header["worker_id"] for r in results} == {r.worker_id for r in prewarms}
    assert [r.cold for r in ledger.records()[2:]] == [False, False]
    assert runtime.stats().cold_starts == 2


def test_capacity_bounds_concurrency(make_runtime) -> None:
    runtime, ledger = make_runtime(capacity_cpus=2)
    sleep = spec("sleep")
    runtime.prewarm(spec=sleep, count=2, wait_s=30)
    t0 = time.monotonic()
    futures = runtime.map(spec=sleep, requests=[Message(header={"seconds": 0.4}) for _ in range(4)])
    for future in futures:
        future.result(timeout=30)
    assert time.monotonic() - t0 >= 0.8
    runs = [r for r in ledger.records() if r.outcome == "ok"]
    for r in runs:  # at no moment more than 2 attempts run at once
        assert sum(o.start_at <= r.start_at < o.end_at for o in runs) <= 2


def test_max_workers_evicts_the_idle_worker_of_another_function(make_runtime) -> None:
    runtime, ledger = make_runtime(max_workers=1)
    pid_a = runtime.invoke(spec=spec("counter"), request=Message()).result(timeout=20).header["pid"]
    b = runtime.invoke(spec=spec("echo_counter", fn="counter"), request=Message()).result(timeout=20)
    assert b.header["pid"] != pid_a and runtime.stats().workers_alive == 1
    assert wait_for(lambda: not pid_alive(pid_a), timeout_s=5)
    assert [r.cold for r in ledger.records()] == [True, True]


def test_p1_failed_attempts_are_retried_and_billed(make_runtime, tmp_path: Path) -> None:
    runtime, ledger = make_runtime()
    request = Message(header={"counter_path": str(tmp_path / "n"), "failures": 2, "rows": 5})
    future = runtime.invoke(spec=spec("fail_first_attempts", max_retries=3), request=request)
    result = future.result(timeout=30)
    assert result.arrays["rows"].shape == (5, 4) and result.header["attempt"] == 3
    rows = ledger.records()
    assert [(r.attempt, r.outcome, r.error_type) for r in rows] == [
        (1, "error", "InjectedFault"), (2, "error", "InjectedFault"), (3, "ok", None)]
    assert len({r.worker_id for r in rows}) >= 2  # a retry goes to another worker when possible
    assert runtime.stats().retries == 2 and runtime.stats().failures == 2


def test_p2_a_superseded_late_result_is_dropped(make_runtime, tmp_path: Path) -> None:
    runtime, ledger = make_runtime()
    slow_first = Message(header={"attempt_seconds": [30, 0]}, arrays={"pad": np.ones(1 << 17, np.uint8)})
    result = runtime.invoke(spec=spec("sleep", timeout_s=0.7, max_retries=1), request=slow_first).result(timeout=30)
    assert result.header["attempt"] == 2
    timed_out, accepted = ledger.records()
    assert (timed_out.outcome, accepted.outcome) == ("timeout", "ok")
    # What a late worker would send: the stale attempt's result (big enough to travel in shared memory)
    # and a duplicate of the accepted one, pulled through a real Inbox, then handed to the runtime.
    a, b = socket.socketpair()
    inbox = Inbox()
    inbox.add_source(source="peer", sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(), pid=os.getpid()))
    outbox = Outbox(sock=a)
    for attempt in (1, 2):
        outbox.send(message=Message(header={"attempt": attempt}, arrays={"x": np.ones(1 << 18, np.uint8)}),
                    tag={"op": "result", "invocation_id": accepted.invocation_id, "attempt": attempt,
                         "start_at": 0.0, "end_at": 1.0, "outcome": "ok", "error": None})
    for worker_id in (timed_out.worker_id, accepted.worker_id):
        runtime._on_envelope(dataclasses.replace(inbox.get(timeout_s=10), source=worker_id))
    outbox.close(), inbox.close(), a.close()
    assert runtime.stats().dropped_results == 2
    assert len(ledger.records()) == 2 and result.header["attempt"] == 2
    assert list_segments(prefix=run_prefix()) == []


def test_a_busy_worker_s_result_is_accepted_only_for_its_current_attempt(make_runtime) -> None:
    """P2 at the acceptance guard: while a worker runs attempt 1 of an invocation, results from that worker
    naming attempt 2 of it, or another invocation, are dropped; then its real result is accepted."""
    runtime, ledger = make_runtime(capacity_cpus=1)
    future = runtime.invoke(spec=spec("sleep", timeout_s=60, max_retries=1), request=Message(header={"seconds": 1.5}))
    assert wait_for(lambda: any(w.state == "busy" for w in runtime._pool.slots.values()), timeout_s=30)
    (worker,) = [w for w in runtime._pool.slots.values() if w.state == "busy"]
    attempt = worker.attempt
    a, b = socket.socketpair()
    inbox = Inbox()
    inbox.add_source(source="peer", sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(), pid=os.getpid()))
    outbox = Outbox(sock=a)
    for invocation_id, number in ((attempt.invocation.invocation_id, attempt.number + 1),
                                  ("another-invocation", attempt.number)):
        outbox.send(message=Message(header={"forged": True}),
                    tag={"op": "result", "invocation_id": invocation_id, "attempt": number,
                         "start_at": 0.0, "end_at": 1.0, "outcome": "ok", "error": None})
        runtime._on_envelope(dataclasses.replace(inbox.get(timeout_s=10), source=worker.worker_id))
    outbox.close(), inbox.close(), a.close()
    assert runtime.stats().dropped_results == 2 and not future.done()
    result = future.result(timeout=30)
    assert "forged" not in result.header and result.header["slept_s"] == 1.5 and result.header["attempt"] == 1
    assert [(r.attempt, r.outcome) for r in ledger.records()] == [(1, "ok")]


def test_p3_spent_retries_raise_the_original_error(make_runtime) -> None:
    runtime, ledger = make_runtime()
    future = runtime.invoke(spec=spec("raise_error", max_retries=2, retry_exceptions=2),
                            request=Message(header={"error": "ValueError"}))
    with pytest.raises(FunctionFailed) as info:
        future.result(timeout=30)
    assert info.value.error_type == "ValueError" and info.value.attempts == 3
    assert "raise_error" in info.value.traceback_text and "ValueError: raise_error" in info.value.traceback_text
    assert [r.outcome for r in ledger.records()] == ["error"] * 3
    assert runtime.stats().failed_invocations == 1


def test_non_retryable_errors_fail_at_once(make_runtime) -> None:
    runtime, ledger = make_runtime()
    future = runtime.invoke(spec=spec("raise_error", max_retries=3),
                            request=Message(header={"error": "EnvContractError"}))
    with pytest.raises(FunctionFailed) as info:
        future.result(timeout=30)
    assert info.value.error_type == "EnvContractError" and info.value.attempts == 1
    assert len(ledger.records()) == 1


def test_an_entrypoint_that_does_not_import_fails_with_its_error(make_runtime) -> None:
    runtime, ledger = make_runtime()
    future = runtime.invoke(spec=spec("missing", fn="no_such_function", max_retries=1, retry_exceptions=1),
                            request=Message())
    with pytest.raises(FunctionFailed) as info:
        future.result(timeout=30)
    assert info.value.error_type == "AttributeError" and info.value.attempts == 2
    assert all(r.cold and r.outcome == "error" for r in ledger.records())


def test_p6_timeout_kills_the_worker_and_bills_the_timeout(make_runtime, tmp_path: Path) -> None:
    runtime, ledger = make_runtime()
    pid_path = tmp_path / "pid"
    future = runtime.invoke(spec=spec("sleep", timeout_s=0.5, max_retries=0),
                            request=Message(header={"seconds": 30, "pid_path": str(pid_path)}))
    with pytest.raises(FunctionFailed) as info:
        future.result(timeout=30)
    assert info.value.error_type == "FunctionTimeout"
    (record,) = ledger.records()
    assert record.outcome == "timeout"
    assert 0.5 <= record.duration_s <= 0.5 + 1.0  # killed within timeout + grace
    assert record.billed_s >= 0.5
    assert wait_for(lambda: not pid_alive(int(pid_path.read_text())), timeout_s=2)
    assert runtime.stats().timeouts == 1 and runtime.stats().workers_alive == 0


def test_a_worker_killed_mid_invocation_is_retried(make_runtime, tmp_path: Path) -> None:
    runtime, ledger = make_runtime()
    pid_path = tmp_path / "pid"
    future = runtime.invoke(spec=spec("sleep", max_retries=1),
                            request=Message(header={"attempt_seconds": [30, 0], "pid_path": str(pid_path)}))
    os.kill(written_pid(pid_path, timeout_s=20), signal.SIGKILL)
    assert future.result(timeout=30).header["attempt"] == 2
    assert [r.outcome for r in ledger.records()] == ["worker_died", "ok"]


@pytest.mark.parametrize("mode", ["sigkill", "exit"])
def test_a_worker_that_dies_by_itself_is_retried(make_runtime, mode: str) -> None:
    runtime, ledger = make_runtime()
    future = runtime.invoke(spec=spec("crash"), request=Message(header={"attempts": [1], "mode": mode}))
    assert future.result(timeout=30).header["attempt"] == 2
    assert [r.outcome for r in ledger.records()] == ["worker_died", "ok"]


def test_bodies_of_every_size_and_no_leaks_after_shutdown(make_runtime) -> None:
    foreign = Segment.create(name=f"{run_prefix()}store_keep_0", size_bytes=64)  # another part's segment
    foreign.close()
    before = list_segments(prefix=run_prefix())
    runtime, _ = make_runtime()
    big, echo = spec("big"), spec("echo")
    for header in ({"nbytes": 3 << 20}, {"nbytes": 3 << 20, "random": True}, {"nbytes": 100}):
        result = runtime.invoke(spec=big, request=Message(header=header)).result(timeout=30)
        assert result.arrays["data"].nbytes == header["nbytes"]
    payload = np.random.default_rng(1).standard_normal(300_000).astype(np.float32)  # ~1.2 MB request
    result = runtime.invoke(spec=echo, request=Message(header={"k": 1}, arrays={"p": payload})).result(timeout=30)
    np.testing.assert_array_equal(result.arrays["p"], payload)
    slow = runtime.invoke(spec=spec("sleep", timeout_s=60), request=Message(
        header={"seconds": 30}, arrays={"pad": np.zeros(1 << 18, np.uint8)}))  # in flight at shutdown
    assert wait_for(lambda: runtime.stats().busy_cpus == 1, timeout_s=20)
    runtime.shutdown()
    with pytest.raises(CancelledError):
        slow.result(timeout=1)
    assert list_segments(prefix=run_prefix()) == before
    with pytest.raises(RuntimeError):
        runtime.invoke(spec=echo, request=Message())
    foreign.unlink()


def test_several_functions_in_flight_at_once(make_runtime) -> None:
    runtime, ledger = make_runtime(capacity_cpus=2)
    learner = spec("learner", fn="sleep", kind="learner")
    actor = spec("actor", fn="sleep")
    futures = [runtime.invoke(spec=learner, request=Message(header={"seconds": 0.3})),
               runtime.invoke(spec=actor, request=Message(header={"seconds": 0.3}))]
    assert {f.result(timeout=30).header["worker_id"].split("-")[0] for f in futures} == {"learner", "actor"}
    learner_row, actor_row = sorted(ledger.records(), key=lambda r: r.kind, reverse=True)
    assert learner_row.start_at < actor_row.end_at and actor_row.start_at < learner_row.end_at
    assert set(ledger.totals().billed_s_by_kind) == {"learner", "actor"}
