"""``nimbus bench transfer``: XingTian's transmission benchmark (XingTian §5.1, "dummy algorithm").

N senders (processes) each push ``messages`` messages of S bytes to one receiver that consumes
asynchronously; per cell the aggregate MB/s (payload bytes / time from "go" to the last message in
the receiver's hands, MB = 10⁶ bytes) and the per-message latency (send call → in the receiver's
hands), over every transport of bench/transports.py, side by side: all transports stay up and the
cells are interleaved transport by transport within each repeat, so a load change on the shared
machine hits them alike. Each figure is also given as a ratio to ``memcpy`` (same size and payload).

LZ4 cells (``channel+lz4``, ``redis+lz4``: bodies of ≥ 1 MiB compressed) run on both payload kinds,
so the table shows where compression pays (compressible Atari frames) and where it costs (floats).

Example::

    report = run_transfer(grid=TransferGrid.default())
    print_table(report=report, console=Console())
    write_json(report=report, path=Path("benchmarks/results/transfer.json"))
"""

from __future__ import annotations

import json
import logging
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nimbus.bench.transport_base import CellSpec, Sample, Transport
from nimbus.bench.transports import make_transport, unavailable

log = logging.getLogger(__name__)
KiB, MiB = 1 << 10, 1 << 20
BASE_TRANSPORTS = ("memcpy", "memcpy_warm", "mp_queue", "ray", "redis", "channel_segment", "channel")
LZ4_TRANSPORTS = ("channel+lz4", "redis+lz4")


@dataclass(frozen=True)
class TransferGrid:
    """What to measure. ``lz4_sizes``: sizes of the LZ4 cells (1 sender, every payload kind)."""

    transports: tuple[str, ...] = BASE_TRANSPORTS
    senders: tuple[int, ...] = (1, 4)
    sizes: tuple[int, ...] = (64 * KiB, MiB, 16 * MiB)
    messages: int = 20
    repeats: int = 3
    payload: str = "random"
    lz4_sizes: tuple[int, ...] = (16 * MiB,)
    lz4_payloads: tuple[str, ...] = ("random", "atari")
    warmup: bool = True  # one unrecorded pass first (pool attach, Ray's first puts, Redis buffers)

    @classmethod
    def full(cls) -> TransferGrid:
        """XingTian's whole grid: 1, 2, 4, 8 senders × 64 KiB, 1 MiB, 16 MiB, 64 MiB."""
        return cls(senders=(1, 2, 4, 8), sizes=(64 * KiB, MiB, 16 * MiB, 64 * MiB), lz4_sizes=(MiB, 16 * MiB, 64 * MiB))

    def cells(self) -> list[tuple[str, CellSpec]]:
        cells = [(name, CellSpec(senders=n, size_bytes=size, messages=self.messages, payload=self.payload,
                                 compress=False))
                 for size in self.sizes for n in self.senders for name in self.transports]
        lz4_base = [name for name in ("memcpy", "channel", "redis") if name in self.transports]
        lz4 = [name for name in LZ4_TRANSPORTS if name.split("+")[0] in self.transports]
        for payload in self.lz4_payloads:
            for size in self.lz4_sizes:
                for name in lz4_base + lz4:
                    cell = CellSpec(senders=1, size_bytes=size, messages=self.messages, payload=payload,
                                    compress=name.endswith("+lz4"))
                    if (name, cell) not in cells:
                        cells.append((name, cell))
        return cells


@dataclass(frozen=True)
class TransferResult:
    transport: str
    senders: int
    size_bytes: int
    payload: str
    compress: bool
    mb_s_min: float
    mb_s_median: float
    mb_s_max: float
    latency_ms_p50: float  # medians over repeats of each repeat's percentile
    latency_ms_p95: float
    ratio_to_memcpy: float | None = None
    repeats: int = 0


@dataclass(frozen=True)
class TransferReport:
    results: tuple[TransferResult, ...]
    skipped: dict[str, str]
    grid: dict[str, Any]
    environment: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    def find(self, *, transport: str, senders: int, size_bytes: int, payload: str | None = None) -> TransferResult:
        for result in self.results:
            if (result.transport, result.senders, result.size_bytes) == (transport, senders, size_bytes) and \
                    (payload is None or result.payload == payload):
                return result
        raise KeyError(f"no result for {transport} × {senders} senders × {size_bytes} bytes")


def _measure(*, started: float, samples: list[Sample], cell: CellSpec) -> tuple[float, float, float]:
    """(MB/s, p50 latency ms, p95 latency ms) of one repeat."""
    expected = cell.senders * cell.messages
    if len(samples) != expected:
        raise RuntimeError(f"received {len(samples)} of {expected} messages")
    total = sum(sample[2] for sample in samples)
    elapsed = max(sample[1] for sample in samples) - started
    latencies = sorted((t_recv - t_send) * 1e3 for t_send, t_recv, _ in samples)
    p95 = latencies[min(len(latencies) - 1, int(round(0.95 * (len(latencies) - 1))))]
    return total / elapsed / 1e6, statistics.median(latencies), p95


def _summarise(*, name: str, cell: CellSpec, runs: list[tuple[float, float, float]]) -> TransferResult:
    rates = [run[0] for run in runs]
    return TransferResult(transport=name, senders=cell.senders, size_bytes=cell.size_bytes, payload=cell.payload,
                          compress=cell.compress, mb_s_min=min(rates), mb_s_median=statistics.median(rates),
                          mb_s_max=max(rates), latency_ms_p50=statistics.median(run[1] for run in runs),
                          latency_ms_p95=statistics.median(run[2] for run in runs), repeats=len(runs))


def _with_ratios(results: list[TransferResult]) -> list[TransferResult]:
    memcpy = {(r.size_bytes, r.payload, r.senders): r.mb_s_median for r in results if r.transport == "memcpy"}
    out = []
    for result in results:
        base = memcpy.get((result.size_bytes, result.payload, result.senders))
        ratio = result.mb_s_median / base if base else None
        out.append(TransferResult(**{**asdict(result), "ratio_to_memcpy": ratio}))
    return out


def _open_transports(*, grid: TransferGrid) -> tuple[dict[str, Transport], dict[str, str]]:
    transports: dict[str, Transport] = {}
    skipped: dict[str, str] = {}
    for name in grid.transports:
        reason = unavailable(name=name)
        if reason is not None:
            skipped[name] = reason
            continue
        try:
            transports[name] = make_transport(name=name, n=max(grid.senders))
        except Exception as exc:  # noqa: BLE001 - a transport that cannot start is reported, not fatal
            log.warning("transport %s could not start: %s", name, exc)
            skipped[name] = f"could not start: {type(exc).__name__}: {exc}"
    return transports, skipped


def run_transfer(*, grid: TransferGrid) -> TransferReport:
    """Run every cell ``grid.repeats`` times, interleaving transports within each repeat."""
    started = time.perf_counter()
    transports, skipped = _open_transports(grid=grid)
    cells = [(name, cell) for name, cell in grid.cells() if name.split("+")[0] in transports]
    runs: dict[int, list[tuple[float, float, float]]] = {i: [] for i in range(len(cells))}
    try:
        for repeat in range(-1 if grid.warmup else 0, grid.repeats):  # -1: a warm-up pass, not recorded
            for i, (name, cell) in enumerate(cells):
                begun, samples = transports[name.split("+")[0]].run(cell=cell)
                measured = _measure(started=begun, samples=samples, cell=cell)
                if repeat >= 0:
                    runs[i].append(measured)
                log.info("repeat %d %s %s: %.0f MB/s", repeat, name, cell, measured[0])
    finally:
        for transport in transports.values():
            try:
                transport.close()
            except Exception:  # noqa: BLE001
                log.exception("closing transport %s", transport.name)
    results = _with_ratios([_summarise(name=name, cell=cell, runs=runs[i]) for i, (name, cell) in enumerate(cells)])
    return TransferReport(results=tuple(results), skipped=skipped, grid=asdict(grid), environment=environment(),
                          wall_s=time.perf_counter() - started)


def environment() -> dict[str, Any]:
    """Machine and versions, for the record in docs/benchmarks.md."""
    import numpy

    versions = {"python": platform.python_version(), "numpy": numpy.__version__}
    for module in ("torch", "ray", "redis", "lz4", "gymnasium", "mujoco", "stable_baselines3"):
        try:
            versions[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001 - not installed
            versions[module] = None
    return {"cpus": os.cpu_count(), "machine": platform.machine(), "kernel": platform.release(),
            "load_avg_1m": os.getloadavg()[0], "versions": versions}


def format_size(size_bytes: int) -> str:
    for unit, scale in (("MiB", MiB), ("KiB", KiB)):
        if size_bytes >= scale and size_bytes % scale == 0:
            return f"{size_bytes // scale} {unit}"
    return f"{size_bytes} B"


def print_table(*, report: TransferReport, console: Any) -> None:
    from rich.table import Table

    table = Table(title=f"transfer: MB/s median [min-max] over {report.grid['repeats']} repeats, "
                        f"{report.grid['messages']} messages per sender")
    for column in ("transport", "senders", "size", "payload", "MB/s", "× memcpy", "latency p50 ms", "p95 ms"):
        table.add_column(column, justify="left" if column in ("transport", "payload") else "right")
    for r in report.results:
        ratio = "-" if r.ratio_to_memcpy is None else f"{r.ratio_to_memcpy:.3f}"
        table.add_row(r.transport + ("+lz4" if r.compress and not r.transport.endswith("+lz4") else ""),
                      str(r.senders), format_size(r.size_bytes), r.payload,
                      f"{r.mb_s_median:,.0f} [{r.mb_s_min:,.0f}-{r.mb_s_max:,.0f}]", ratio,
                      f"{r.latency_ms_p50:.3f}", f"{r.latency_ms_p95:.3f}")
    console.print(table)
    for name, reason in report.skipped.items():
        console.print(f"skipped {name}: {reason}")


def write_json(*, report: TransferReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(report), indent=1))


def parse_size(text: str) -> int:
    """'64K', '1M', '16MiB', '4096' → bytes."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": KiB, "M": MiB, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)
