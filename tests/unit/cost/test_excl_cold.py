"""The cost without cold starts and provisioned idle time (``cost_excl_cold_usd``, the papers' model), from
hand-made ledger rows with known ``init_s``: exact dollars, and a meter that reads each record once."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger, LedgerRecord
from nimbus.cost.meter import CostMeter
from nimbus.cost.pricing import load_pricing

LAMBDA = 0.0000166667                       # on demand, per GB-s
PROVISIONED, PROVISIONED_DURATION = 0.0000041667, 0.0000097222
QUARTER_V100_PER_S = 0.25 * 3.06 / 3600     # a learner with gpus 0.25


def row(*, kind: str = "actor", cold: bool = False, init_s: float = 0.0, duration_s: float = 2.0,
        outcome: str = "ok", gpus: float = 0.0, memory_mb: int = 1024, provisioned: bool = False,
        billed_s: float | None = None) -> LedgerRecord:
    billed = duration_s + init_s if billed_s is None else billed_s
    return LedgerRecord(invocation_id="i", attempt=0 if outcome == "prewarm" else 1, function=kind, kind=kind,
                        worker_id="w", cold=cold, init_s=init_s, queued_at=0.0, start_at=0.0, end_at=duration_s,
                        duration_s=duration_s, billed_s=billed, cpus=1.0, gpus=gpus, memory_mb=memory_mb,
                        outcome=outcome, provisioned=provisioned)


ROWS = [
    row(cold=True, init_s=0.5, duration_s=2.0),                           # a cold actor: 2.5 s billed, 0.5 s cold
    row(duration_s=3.0),                                                  # a warm actor
    row(kind="learner", gpus=0.25, memory_mb=4096, cold=True, init_s=0.19, duration_s=0.4),   # a cold learner
    row(kind="learner", gpus=0.25, memory_mb=4096, duration_s=0.3),       # a warm learner
    row(kind="actor", memory_mb=2048, cold=True, init_s=1.5, duration_s=0.0, outcome="prewarm",
        provisioned=True),                                                # a pre-warmed worker's start
    row(kind="actor", memory_mb=2048, duration_s=10.0, outcome="prewarm", provisioned=True),  # its 10 s provisioned
    row(kind="actor", memory_mb=2048, duration_s=4.0, provisioned=True),  # of which 4 s busy
]


def test_the_bill_without_cold_starts_and_idle_time_by_hand() -> None:
    pricing = load_pricing()
    full = pricing.cost_breakdown(records=ROWS)
    warm = pricing.cost_breakdown(records=ROWS, excl_cold=True)
    # billed: the cold starts' seconds, the provisioned 10 s at the provisioned rate, the busy 4 s at its duration rate
    assert full == pytest.approx({"actor": (2.5 + 3.0) * LAMBDA + 2 * 1.5 * LAMBDA + 2 * 10.0 * PROVISIONED
                                  + 2 * 4.0 * PROVISIONED_DURATION,
                                  "learner": (0.59 + 0.3) * QUARTER_V100_PER_S}, rel=1e-12)
    # without: each attempt's own seconds; the busy 4 s as a provisioned worker pays them (both rates); starts and
    # the provisioned stretch nothing
    assert warm == pytest.approx({"actor": (2.0 + 3.0) * LAMBDA + 2 * 4.0 * (PROVISIONED + PROVISIONED_DURATION),
                                  "learner": (0.4 + 0.3) * QUARTER_V100_PER_S}, rel=1e-12)
    assert pricing.total_cost_usd(records=ROWS, excl_cold=True) == pytest.approx(sum(warm.values()), rel=1e-12)
    # the difference: the cold starts' price plus the 6 idle provisioned seconds'
    cold_usd = 0.5 * LAMBDA + 0.19 * QUARTER_V100_PER_S + 2 * 1.5 * LAMBDA
    idle_usd = 2 * 6.0 * PROVISIONED
    assert pricing.total_cost_usd(records=ROWS) - sum(warm.values()) == pytest.approx(cold_usd + idle_usd, rel=1e-9)


def test_a_provisioned_gpu_workers_attempts_pay_its_share_for_their_own_seconds() -> None:
    pricing = load_pricing()
    stretch = row(kind="learner", gpus=0.25, duration_s=20.0, outcome="prewarm", provisioned=True)
    busy = row(kind="learner", gpus=0.25, duration_s=5.0, provisioned=True)
    assert pricing.cost_usd(record=busy) == 0.0                           # billed on its stretch
    assert pricing.cost_excl_cold_usd(record=stretch) == 0.0
    assert pricing.cost_excl_cold_usd(record=busy) == pytest.approx(5.0 * QUARTER_V100_PER_S, rel=1e-12)


def test_a_timed_out_cold_attempt_loses_its_init_but_never_below_its_duration() -> None:
    pricing = load_pricing()
    timed_out = row(cold=True, init_s=1.0, duration_s=30.0, billed_s=31.0, outcome="timeout")
    assert pricing.cost_excl_cold_usd(record=timed_out) == pytest.approx(30.0 * LAMBDA, rel=1e-12)
    floored = row(cold=True, init_s=1.0, duration_s=2.0, billed_s=2.5, outcome="timeout")   # hand-made: init > floor
    assert pricing.cost_excl_cold_usd(record=floored) == pytest.approx(2.0 * LAMBDA, rel=1e-12)


def test_the_meter_reads_each_record_once_and_continues_a_resumed_runs_figure(tmp_path: Path) -> None:
    pricing = load_pricing()
    ledger = Ledger(path=tmp_path / "ledger.jsonl", keep_in_memory=2)
    meter = CostMeter(ledger=ledger, pricing=pricing, before_usd=0.5, before_excl_cold_usd=0.25)
    assert (meter.usd(), meter.excl_cold_usd()) == (0.5, 0.25)
    for record in ROWS[:3]:
        ledger.append(record=record)
    assert meter.excl_cold_usd() == pytest.approx(0.25 + 5.0 * LAMBDA + 0.4 * QUARTER_V100_PER_S, rel=1e-12)
    for record in ROWS[3:]:                                  # more than the ledger keeps in memory: read from the file
        ledger.append(record=record)
    expected = 0.25 + pricing.total_cost_usd(records=ROWS, excl_cold=True)
    assert meter.excl_cold_usd() == pytest.approx(expected, rel=1e-12)
    assert meter.excl_cold_usd() == pytest.approx(expected, rel=1e-12)    # nothing new: nothing added
    # both bills from one reading: the full one (read after the other) saw every record too, and so did each kind's
    assert meter.usd() == pytest.approx(0.5 + pricing.total_cost_usd(records=ROWS), rel=1e-12)
    assert meter.usd_by_kind() == pytest.approx(pricing.cost_breakdown(records=ROWS), rel=1e-12)
    # a checkpoint without the second figure: the sessions before count at their full cost
    assert CostMeter(ledger=Ledger(), pricing=pricing, before_usd=0.5).excl_cold_usd() == 0.5
