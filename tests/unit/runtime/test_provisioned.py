"""Pre-warmed workers are provisioned capacity (issue 25.9): the runtime bills their time from ready to retirement,
idle or busy, and marks the attempts they run (cost/ledger.py, cost/pricing.py)."""

from __future__ import annotations

import time

import pytest

from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec

COUNTER = FunctionSpec(name="counter", entrypoint="nimbus.runtime.builtin:counter", timeout_s=20)


def _stretches(records: list) -> list:
    return [r for r in records if r.outcome == "prewarm" and not r.cold]


def test_a_prewarmed_worker_is_billed_from_ready_until_retired(make_runtime) -> None:
    runtime, ledger = make_runtime(keep_alive_s=1.5)
    runtime.prewarm(spec=COUNTER, count=1, wait_s=30)
    start = ledger.records()[0]
    assert start.outcome == "prewarm" and start.cold and start.provisioned
    time.sleep(0.3)                                   # idle, but provisioned: billed
    runtime.invoke(spec=COUNTER, request=Message()).result(timeout=20)
    runtime.bill_provisioned()                        # a round's end
    attempt = [r for r in ledger.records() if r.outcome == "ok"]
    assert len(attempt) == 1 and attempt[0].provisioned and not attempt[0].cold
    first = _stretches(ledger.records())
    assert len(first) == 1 and first[0].start_at == start.end_at and first[0].billed_s >= 0.3
    deadline = time.time() + 10
    while runtime.stats().workers_alive and time.time() < deadline:   # reclaimed at keep-alive
        time.sleep(0.05)
    assert runtime.stats().workers_alive == 0
    stretches = _stretches(ledger.records())
    assert len(stretches) == 2 and stretches[1].start_at == first[0].end_at    # contiguous, ready → retired
    assert stretches[1].billed_s == pytest.approx(stretches[1].end_at - stretches[1].start_at)
    assert stretches[1].billed_s >= 1.0                                         # ~ the keep-alive it sat idle
    assert runtime.stats().cold_starts == 1                                     # stretches are not starts


def test_an_on_demand_worker_has_no_provisioned_time_and_shutdown_adds_none(make_runtime) -> None:
    runtime, ledger = make_runtime()
    runtime.invoke(spec=COUNTER, request=Message()).result(timeout=20)
    runtime.prewarm(spec=COUNTER, count=1, wait_s=30)
    runtime.bill_provisioned()
    assert [r.provisioned for r in ledger.records() if r.outcome == "ok"] == [False]
    before = len(ledger.records())
    runtime.shutdown()
    assert len(ledger.records()) == before            # the run's cost was read before shutdown
