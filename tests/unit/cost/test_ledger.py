"""The ledger: the billing rule, one row per append, the JSON-lines file, totals."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger, LedgerRecord, billed_seconds, totals_of


def record(**overrides) -> LedgerRecord:
    base = dict(invocation_id="a", attempt=1, function="f", kind="actor", worker_id="f-1", cold=False, init_s=0.0,
                queued_at=0.0, start_at=1.0, end_at=3.0, duration_s=2.0, billed_s=2.0, cpus=1.0, gpus=0.0,
                memory_mb=1024, outcome="ok", error_type=None)
    return LedgerRecord(**{**base, **overrides})


def test_billing_rule() -> None:
    assert billed_seconds(duration_s=2.0, init_s=0.5, cold=False, timed_out=False, timeout_s=10) == 2.0
    assert billed_seconds(duration_s=2.0, init_s=0.5, cold=True, timed_out=False, timeout_s=10) == 2.5
    assert billed_seconds(duration_s=0.9, init_s=0.0, cold=False, timed_out=True, timeout_s=1.0) == 1.0
    assert billed_seconds(duration_s=1.2, init_s=0.3, cold=True, timed_out=True, timeout_s=1.0) == pytest.approx(1.5)


def test_unknown_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="outcome"):
        record(outcome="maybe")


def test_file_mirrors_records_and_totals_recompute(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ledger.jsonl"
    ledger = Ledger(path=path)
    rows = [record(), record(attempt=2, outcome="error", error_type="RuntimeError", cold=True, init_s=0.4,
                             billed_s=2.4), record(invocation_id="b", kind="learner", gpus=0.25, billed_s=5.0),
            record(invocation_id="p", attempt=0, outcome="prewarm", cold=True, init_s=0.3, billed_s=0.3,
                   duration_s=0.0), record(invocation_id="c", outcome="timeout", billed_s=3.0)]
    for row in rows:
        ledger.append(record=row)
    assert Ledger.load(path=path) == ledger.records() == rows
    totals = ledger.totals()
    assert (totals.invocations, totals.attempts, totals.prewarms) == (3, 4, 1)
    assert (totals.cold_starts, totals.warm_starts, totals.retries) == (2, 3, 1)
    assert (totals.failures, totals.timeouts) == (2, 1)
    assert totals.billed_s_by_kind == pytest.approx({"actor": 7.7, "learner": 5.0})
    assert totals_of(records=Ledger.load(path=path)) == totals


def test_concurrent_appends_are_all_kept(tmp_path: Path) -> None:
    ledger = Ledger(path=tmp_path / "l.jsonl")

    def write(thread: int) -> None:
        for i in range(200):
            ledger.append(record=replace(record(), invocation_id=f"{thread}-{i}"))

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(Ledger.load(path=tmp_path / "l.jsonl")) == len(ledger.records()) == 800


def test_records_from_an_offset_are_the_tail() -> None:
    ledger = Ledger()
    rows = [record(invocation_id=str(i)) for i in range(5)]
    for row in rows:
        ledger.append(record=row)
    assert ledger.records() == rows and ledger.records(start=3) == rows[3:] and ledger.records(start=5) == []
    assert LedgerRecord.from_json(rows[0].to_json()) == rows[0]


def test_a_bounded_ledger_keeps_totals_and_the_file_whole(tmp_path) -> None:
    """keep_in_memory (a long run's driver, P13): old records leave memory, never the totals or the file."""
    ledger = Ledger(path=tmp_path / "ledger.jsonl", keep_in_memory=10)
    full = Ledger()
    for i in range(57):
        row = record(invocation_id=f"inv-{i // 2}", attempt=1 + i % 2, outcome="ok")
        ledger.append(record=row)
        full.append(record=row)
    assert ledger.totals() == full.totals() == totals_of(records=full.records())
    assert ledger.totals().invocations == 29 and ledger.totals().attempts == 57
    assert len(ledger.records(start=50)) == 7 and ledger.records(start=50) == full.records()[50:]
    with pytest.raises(LookupError, match="no longer in memory"):
        ledger.records()
    ledger.close()
    assert Ledger.load(path=tmp_path / "ledger.jsonl") == full.records()


def test_records_since_reads_the_file_for_records_no_longer_in_memory(tmp_path) -> None:
    """Cost accounting reads every record once, even when a round wrote more than the ledger keeps in memory
    (pre-warmed workers' provisioned time adds records every round)."""
    ledger = Ledger(path=tmp_path / "ledger.jsonl", keep_in_memory=2)
    for i in range(9):
        ledger.append(record=record(invocation_id=f"i{i}"))
    with pytest.raises(LookupError):
        ledger.records(start=1)
    assert [r.invocation_id for r in ledger.records_since(start=1)] == [f"i{i}" for i in range(1, 9)]
    assert [r.invocation_id for r in ledger.records_since(start=8)] == ["i8"]      # in memory: no file read
    memory_only = Ledger(keep_in_memory=1)
    for i in range(4):
        memory_only.append(record=record(invocation_id=f"i{i}"))
    with pytest.raises(LookupError):     # no file to read them from
        memory_only.records_since(start=0)


def test_records_since_counts_only_this_ledgers_records_in_a_resumed_runs_file(tmp_path) -> None:
    """A resumed run appends to the ledger file of the sessions before: reading records no longer in memory
    from the file must skip those sessions' rows, or the resumed run's cost counts them twice."""
    path = tmp_path / "ledger.jsonl"
    before = Ledger(path=path)
    for i in range(3):
        before.append(record=record(invocation_id=f"old{i}"))
    before.close()
    ledger = Ledger(path=path, keep_in_memory=2)   # the resumed session
    for i in range(5):
        ledger.append(record=record(invocation_id=f"new{i}"))
    assert [r.invocation_id for r in ledger.records_since(start=0)] == [f"new{i}" for i in range(5)]
    assert [r.invocation_id for r in ledger.records_since(start=1)] == [f"new{i}" for i in range(1, 5)]


def test_provisioned_stretches_are_not_starts_nor_attempts() -> None:
    stretch = record(outcome="prewarm", attempt=0, cold=False, provisioned=True)
    start = record(outcome="prewarm", attempt=0, cold=True, provisioned=True)
    totals = totals_of(records=[start, stretch, stretch])
    assert (totals.prewarms, totals.cold_starts, totals.attempts) == (1, 1, 0)


def test_load_skips_a_torn_last_row_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """#28.6: a driver killed mid-row (or a full disk) leaves a torn last line; the report still reads the rest."""
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path=path)
    for attempt in (1, 2):
        ledger.append(record=record(attempt=attempt))
    ledger.close()
    with open(path, "a") as handle:
        handle.write(record(attempt=3).to_json()[:40])
    with caplog.at_level("WARNING"):
        assert Ledger.load(path=path) == ledger.records()
    assert "line 3 is not JSON (a torn last line); skipped" in caplog.text
