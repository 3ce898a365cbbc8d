"""How an attempt ends (runtime/attempts.py): retries keep their place (P1), an attempt cut short by
shutdown is still billed once (P14), and sticky routing prefers an unbound worker to another key's."""

from __future__ import annotations

import time
from concurrent.futures import CancelledError
from pathlib import Path
from types import SimpleNamespace

import pytest

from nimbus.data.codec import Message
from nimbus.runtime.attempts import by_affinity
from nimbus.runtime.base import FunctionSpec, Resources
from runtime_helpers import wait_for

B = "nimbus.runtime.builtin:"


def _spec(name: str, *, fn: str) -> FunctionSpec:
    return FunctionSpec(name=name, entrypoint=B + fn, resources=Resources(cpus=1.0), timeout_s=30, max_retries=2)


def test_a_retry_runs_before_work_admitted_after_its_invocation(make_runtime, tmp_path: Path) -> None:
    """One CPU: X fails its first attempt while Y waits behind it. X's retry was admitted first, so it runs
    before Y: a failing attempt does not send its invocation to the back of the queue."""
    runtime, ledger = make_runtime(capacity_cpus=1)
    x = runtime.invoke(spec=_spec("flaky", fn="fail_first_attempts"),
                       request=Message(header={"counter_path": str(tmp_path / "n"), "failures": 1}))
    y = runtime.invoke(spec=_spec("later", fn="sleep"), request=Message(header={"seconds": 0.0}))
    x_id, y_id = x.result(timeout=60).header["_invocation_id"], y.result(timeout=60).header["_invocation_id"]
    rows = sorted(ledger.records(), key=lambda r: r.start_at)
    assert [(r.invocation_id, r.attempt, r.outcome) for r in rows] == [
        (x_id, 1, "error"), (x_id, 2, "ok"), (y_id, 1, "ok")]


def test_an_attempt_cut_short_by_shutdown_is_billed_once_as_cancelled(make_runtime) -> None:
    """P14: shutdown while an attempt runs cancels its future and bills the attempt, exactly one row."""
    runtime, ledger = make_runtime(capacity_cpus=1)
    future = runtime.invoke(spec=_spec("long", fn="sleep"), request=Message(header={"seconds": 60.0}))
    assert wait_for(lambda: any(w.state == "busy" for w in runtime._pool.slots.values()), timeout_s=30)
    time.sleep(0.3)
    runtime.shutdown()
    with pytest.raises(CancelledError):
        future.result(timeout=10)
    (row,) = ledger.records()
    assert (row.function, row.attempt, row.outcome) == ("long", 1, "cancelled")
    assert row.duration_s >= 0.3 and row.billed_s >= row.duration_s   # from its dispatch to the shutdown
    assert ledger.totals().attempts == 1


def _worker(name: str, affinity: str | None) -> SimpleNamespace:
    return SimpleNamespace(worker_id=name, affinity=affinity)


def test_a_new_key_takes_an_unbound_worker_not_another_keys_warm_one() -> None:
    """Sticky routing: the worker that served the key, else one bound to nothing (another key's worker keeps
    its per-key state for that key), else the first idle one."""
    a, free, c = _worker("wa", "a"), _worker("wfree", None), _worker("wc", "c")
    assert by_affinity([a, free, c], affinity="c") is c
    assert by_affinity([a, free, c], affinity="b") is free
    assert by_affinity([a, c], affinity="b") is a          # nothing unbound: a preference, never a wait
    assert by_affinity([a, free], affinity=None) is a
