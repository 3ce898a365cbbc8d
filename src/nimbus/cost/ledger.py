"""The Ledger: one record per attempt, exactly once (P14). The only source of cost figures.

Billing rule (what ``billed_s`` means, applied by ``billed_seconds``):

* ``duration_s`` = ``end_at - start_at`` of the attempt: from the moment the function started
  running (the worker's clock) to its return; for a killed attempt, from dispatch to the kill (or to
  the moment its worker's death was seen).
* ``billed_s`` = ``duration_s`` + ``init_s`` when the attempt was a cold start (its worker was
  spawned for it: process start -> entrypoint imported). A prewarmed worker's init is billed once, on
  its ``"prewarm"`` record (``duration_s`` 0, ``billed_s`` = ``init_s``); its first invocation is warm.
* A timed-out attempt bills at least ``timeout_s`` (Lambda bills a timed-out function its full
  timeout, P6).
* Provisioned capacity (Lambda's provisioned concurrency): a worker started ahead of work (pre-warmed or
  pre-registered) is provisioned from the end of its start until it is retired. The runtime writes that
  time as ``"prewarm"`` records with ``provisioned`` true and ``cold`` false (``provisioned_record``: one per
  worker and round, ``bill_provisioned``, and one at its retirement during the run), ``billed_s`` = the
  stretch; attempts that ran on such a worker have ``provisioned`` true too. Pricing bills both at
  provisioned rates (cost/pricing.py).

Outcomes: ``ok`` | ``error`` (the function raised) | ``timeout`` | ``worker_died`` | ``prewarm`` |
``cancelled`` (in flight when the runtime shut down). Prices live in ``cost/pricing.py``.

Example::

    ledger = Ledger(path=Path("runs/x/ledger.jsonl"))
    runtime = LocalRuntime(ledger=ledger)
    ...
    totals = ledger.totals()           # LedgerTotals(invocations=..., billed_s_by_kind={"actor": ...})
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from nimbus.data.jsonl import read_jsonl

if TYPE_CHECKING:
    from nimbus.runtime.base import FunctionSpec

OUTCOMES = ("ok", "error", "timeout", "worker_died", "prewarm", "cancelled")
FAILED_OUTCOMES = frozenset({"error", "timeout", "worker_died"})


@dataclass(frozen=True)
class LedgerRecord:
    """One attempt of one invocation (or one prewarmed worker). Times are ``time.time()`` seconds."""

    invocation_id: str
    attempt: int
    function: str
    kind: str
    worker_id: str
    cold: bool
    init_s: float
    queued_at: float
    start_at: float
    end_at: float
    duration_s: float
    billed_s: float
    cpus: float
    gpus: float
    memory_mb: int
    outcome: str
    error_type: str | None = None
    workload: str = ""   # the workload whose function this was (several workloads on one pool)
    device: str = ""     # the device this attempt leased from the device pool (runtime/devices.py); "" if none
    lease_start_at: float | None = None  # when the lease began (placement) and ended (the attempt's end)
    lease_end_at: float | None = None
    provisioned: bool = False   # ran on (or, outcome "prewarm" and not cold: is the time of) a provisioned worker
    device_peak_bytes: int | None = None  # the lease's peak CUDA memory (max_memory_allocated); None off CUDA

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"ledger outcome {self.outcome!r} is not one of {OUTCOMES}")

    def to_json(self) -> str:
        return json.dumps(dict(vars(self)), separators=(",", ":"))  # flat fields: no need for asdict's deep copy

    @classmethod
    def from_json(cls, line: str) -> LedgerRecord:
        return cls.from_dict(json.loads(line))

    @classmethod
    def from_dict(cls, data: dict) -> LedgerRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def billed_seconds(*, duration_s: float, init_s: float, cold: bool, timed_out: bool, timeout_s: float) -> float:
    """The billing rule of this module's docstring."""
    billed = max(0.0, duration_s) + (init_s if cold else 0.0)
    return max(billed, timeout_s) if timed_out else billed


@dataclass(frozen=True)
class LedgerTotals:
    """Aggregates over ledger records. ``failures`` counts failed *attempts* (error, timeout, worker_died)."""

    invocations: int
    attempts: int
    cold_starts: int
    warm_starts: int
    prewarms: int
    retries: int
    failures: int
    timeouts: int
    billed_s: float
    billed_s_by_kind: dict[str, float]


class Tally:
    """Running totals, one record at a time (``totals_of`` for a stream; the runtime's counters)."""

    def __init__(self) -> None:
        self._counts = dict.fromkeys(("invocations", "attempts", "cold_starts", "warm_starts", "prewarms", "retries",
                                      "failures", "timeouts"), 0)
        self._billed_s_by_kind: dict[str, float] = {}

    def add(self, *, record: LedgerRecord) -> None:
        c = self._counts
        self._billed_s_by_kind[record.kind] = self._billed_s_by_kind.get(record.kind, 0.0) + record.billed_s
        c["cold_starts"] += record.cold
        if record.outcome == "prewarm":  # a cold start (or a provisioned stretch: cold false), not an attempt
            c["prewarms"] += record.cold
            return
        c["invocations"] += record.attempt == 1  # every invocation bills its first attempt exactly once (P14)
        c["attempts"] += 1
        c["warm_starts"] += not record.cold
        c["retries"] += record.attempt > 1
        c["failures"] += record.outcome in FAILED_OUTCOMES
        c["timeouts"] += record.outcome == "timeout"

    def totals(self) -> LedgerTotals:
        return LedgerTotals(**self._counts, billed_s=sum(self._billed_s_by_kind.values()),
                            billed_s_by_kind=dict(self._billed_s_by_kind))


def totals_of(*, records: Iterable[LedgerRecord]) -> LedgerTotals:
    """Recompute totals from records (prewarm records are cold starts but not attempts)."""
    tally = Tally()
    for record in records:
        tally.add(record=record)
    return tally.totals()


def attempt_record(*, spec: FunctionSpec, invocation_id: str, attempt: int, worker_id: str, cold: bool,
                   init_s: float, queued_at: float, start_at: float, end_at: float, outcome: str,
                   error_type: str | None, device: str = "", lease_start_at: float | None = None,
                   lease_end_at: float | None = None, provisioned: bool = False,
                   device_peak_bytes: int | None = None) -> LedgerRecord:
    """The record of one attempt of ``spec``, billed by the rule of this module's docstring (``device`` and the
    lease times: the device pool's lease this attempt held, runtime/devices.py)."""
    duration = max(0.0, end_at - start_at)
    init_s = init_s if cold else 0.0
    billed = billed_seconds(duration_s=duration, init_s=init_s, cold=cold, timed_out=outcome == "timeout",
                            timeout_s=spec.timeout_s)
    return LedgerRecord(invocation_id=invocation_id, attempt=attempt, function=spec.name, kind=spec.kind,
                        worker_id=worker_id, cold=cold, init_s=init_s, queued_at=queued_at, start_at=start_at,
                        end_at=end_at, duration_s=duration, billed_s=billed, cpus=spec.resources.cpus,
                        gpus=spec.resources.gpus, memory_mb=spec.resources.memory_mb, outcome=outcome,
                        error_type=error_type, workload=spec.workload, device=device,
                        lease_start_at=lease_start_at, lease_end_at=lease_end_at, provisioned=provisioned,
                        device_peak_bytes=device_peak_bytes)


def provisioned_record(*, spec: FunctionSpec, worker_id: str, requested_at: float, start_at: float,
                       end_at: float) -> LedgerRecord:
    """A provisioned worker's time from ``start_at`` to ``end_at`` (module docstring): billed whole, idle or not."""
    duration = max(0.0, end_at - start_at)
    return LedgerRecord(invocation_id=f"provisioned-{worker_id}-{start_at:.6f}", attempt=0, function=spec.name,
                        kind=spec.kind, worker_id=worker_id, cold=False, init_s=0.0, queued_at=requested_at,
                        start_at=start_at, end_at=end_at, duration_s=duration, billed_s=duration,
                        cpus=spec.resources.cpus, gpus=spec.resources.gpus, memory_mb=spec.resources.memory_mb,
                        outcome="prewarm", workload=spec.workload, provisioned=True)


class Ledger:
    """Append-only, thread-safe list of LedgerRecords, mirrored to a JSON-lines file if ``path`` is set.

    Each row is flushed as it is written, so a killed driver leaves a complete ledger up to its
    last finished attempt.

    Example::

        ledger = Ledger(path=tmp / "ledger.jsonl")
        ledger.append(record=record)
        assert Ledger.load(path=tmp / "ledger.jsonl") == ledger.records()
    """

    def __init__(self, *, path: Path | None = None, keep_in_memory: int | None = None) -> None:
        """``keep_in_memory``: hold only the newest this-many records in memory (the file has them all;
        totals are kept running), so a long run's driver does not grow with its ledger (P13)."""
        self._path, self._keep = path, keep_in_memory
        self.by_workload: dict[str, Ledger] = {}  # a shared pool's ledger also appends each row to its workload's
        self._records: list[LedgerRecord] = []
        self._dropped = 0  # records no longer in memory (still in the file)
        self._tally = Tally()
        self._lock = threading.Lock()
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    @property
    def path(self) -> Path | None:
        return self._path

    def append(self, *, record: LedgerRecord) -> None:
        """Add one record (and write it through to the file)."""
        with self._lock:
            self._records.append(record)
            self._tally.add(record=record)
            if self._file is not None:
                self._file.write(record.to_json() + "\n")
                self._file.flush()
            if record.workload in self.by_workload:
                self.by_workload[record.workload].append(record=record)
            if self._keep is not None and len(self._records) >= 2 * self._keep:  # trim in batches: O(1) amortised
                drop = len(self._records) - self._keep
                del self._records[:drop]
                self._dropped += drop

    def records(self, *, start: int = 0) -> list[LedgerRecord]:
        """A snapshot of the records from the ``start``-th on (default: all), in the order they were written.

        Raises LookupError when some of them are only in the file any more (``keep_in_memory``)."""
        with self._lock:
            if start < self._dropped:
                raise LookupError(f"ledger records {start}..{self._dropped - 1} are no longer in memory; "
                                  f"read them from {self._path} (Ledger.load)")
            return self._records[start - self._dropped:]

    def records_since(self, *, start: int) -> list[LedgerRecord]:
        """``records(start=start)``, reading the file for the ones no longer in memory (a round that wrote more
        than ``keep_in_memory`` records before its cost was read): what cost accounting needs, every record once.
        ``start`` counts this ledger's records: a resumed run's file also holds the sessions before, first."""
        try:
            return self.records(start=start)
        except LookupError:
            if self._path is None:
                raise
            with self._lock:   # every appended line is flushed; no append while reading
                rows = Ledger.load(path=self._path)
                mine = self._dropped + len(self._records)   # this ledger's records: the file's last ones
                return rows[len(rows) - mine + start:]

    def totals(self) -> LedgerTotals:
        with self._lock:
            return self._tally.totals()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @staticmethod
    def load(*, path: Path) -> list[LedgerRecord]:
        """Read a ledger file back (e.g. for a report); a torn last line (a killed driver, a full disk) or another
        line that is not a record is skipped with a warning (data/jsonl.py)."""
        return [LedgerRecord.from_dict(row) for row in read_jsonl(path=path) if isinstance(row, dict)]
