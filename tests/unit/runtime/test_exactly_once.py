"""P14: the ledger bills every attempt exactly once, whatever fails; totals recompute from the rows."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from nimbus.cost.ledger import FAILED_OUTCOMES, Ledger, totals_of
from nimbus.data.codec import Message
from nimbus.errors import FunctionFailed
from nimbus.runtime.base import FunctionSpec

MAX_RETRIES = 2
OUTCOME = {"ok": "ok", "error": "error", "fatal": "error", "crash": "worker_died", "hang": "timeout"}
SCRIPTED = FunctionSpec(name="scripted", entrypoint="nimbus.runtime.builtin:scripted", timeout_s=0.6,
                        max_retries=MAX_RETRIES)
# "hang" and "crash" cost a respawn (and hang a timeout): drawn less often than the cheap outcomes.
action = st.sampled_from(["ok", "error", "error", "fatal", "crash", "hang"])
schedules = st.lists(st.lists(action, max_size=MAX_RETRIES + 1), min_size=1, max_size=3)


def expected_outcomes(script: list[str]) -> list[str]:
    outcomes = []
    for attempt in range(1, MAX_RETRIES + 2):
        step = script[attempt - 1] if attempt <= len(script) else "ok"
        outcomes.append(OUTCOME[step])
        if step in ("ok", "fatal"):
            break
    return outcomes


def test_p14_ledger_rows_equal_attempts(make_runtime, tmp_path: Path) -> None:
    runtime, ledger = make_runtime(capacity_cpus=2)
    seen: list[str] = []

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(scripts=schedules)
    def check(scripts: list[list[str]]) -> None:
        futures: list[Future] = [runtime.invoke(spec=SCRIPTED, request=Message(header={"script": s})) for s in scripts]
        for script, future in zip(scripts, futures):
            expected = expected_outcomes(script)
            try:
                accepted = future.result(timeout=60)
                invocation_attempt = accepted.header["attempt"]
                assert expected[-1] == "ok" and invocation_attempt == len(expected)
            except FunctionFailed as failed:
                assert expected[-1] != "ok" and failed.attempts == len(expected)
        by_invocation: dict[str, list] = {}
        for record in ledger.records():
            if record.invocation_id not in seen:
                by_invocation.setdefault(record.invocation_id, []).append(record)
        assert len(by_invocation) == len(scripts)
        got = sorted([r.outcome for r in sorted(rows, key=lambda r: r.attempt)] for rows in by_invocation.values())
        assert got == sorted(expected_outcomes(s) for s in scripts)
        for rows in by_invocation.values():
            assert sorted(r.attempt for r in rows) == list(range(1, len(rows) + 1))
        seen.extend(by_invocation)

    check()
    records = ledger.records()
    assert Ledger.load(path=ledger.path) == records  # the file holds exactly the same rows
    totals = ledger.totals()
    assert totals == totals_of(records=Ledger.load(path=ledger.path))
    attempts = [r for r in records if r.outcome != "prewarm"]
    assert totals.attempts == len(attempts) and totals.invocations == len(seen)
    assert totals.failures == sum(r.outcome in FAILED_OUTCOMES for r in attempts)
    assert abs(totals.billed_s - sum(r.billed_s for r in records)) < 1e-9
    stats = runtime.stats()
    assert (stats.failures, stats.timeouts, stats.retries) == (totals.failures, totals.timeouts, totals.retries)
