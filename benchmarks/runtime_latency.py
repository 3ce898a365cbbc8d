"""LocalRuntime latency: warm invocation of ``empty`` and a worker's cold start.

* warm: ``invoke(empty).result()`` one at a time on a warm worker, ``--calls`` calls per repeat; the
  median and p90 of each repeat, then min/median/max of those across ``--repeats`` repeats.
  Goal: median <= 5 ms.
* cold start: spawn -> entrypoint imported -> ready (``init_s`` the worker reports, and the wall time
  of ``prewarm(wait_s=...)`` as the driver sees it), plus a cold ``invoke`` end to end, ``--cold`` times.

Run:  python benchmarks/runtime_latency.py   (writes benchmarks/results/runtime_latency.json)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.local import LocalRuntime

EMPTY = "nimbus.runtime.builtin:empty"


def warm_latency(*, runtime: LocalRuntime, calls: int, repeats: int) -> dict:
    spec = FunctionSpec(name="empty", entrypoint=EMPTY, timeout_s=30)
    runtime.prewarm(spec=spec, count=1, wait_s=60)
    for _ in range(20):  # warm the code paths
        runtime.invoke(spec=spec, request=Message()).result()
    medians, p90s = [], []
    for _ in range(repeats):
        lat = np.empty(calls)
        for i in range(calls):
            t0 = time.perf_counter()
            runtime.invoke(spec=spec, request=Message()).result()
            lat[i] = time.perf_counter() - t0
        medians.append(float(np.median(lat)) * 1e3)
        p90s.append(float(np.percentile(lat, 90)) * 1e3)
    return {"calls_per_repeat": calls, "repeats": repeats, "median_ms": medians, "p90_ms": p90s}


def cold_start(*, runtime: LocalRuntime, ledger: Ledger, repeats: int) -> dict:
    ready_wall, init_s, invoke_wall = [], [], []
    for i in range(repeats):
        spec = FunctionSpec(name=f"empty-prewarm-{i}", entrypoint=EMPTY, timeout_s=30)
        t0 = time.perf_counter()
        runtime.prewarm(spec=spec, count=1, wait_s=60)
        ready_wall.append((time.perf_counter() - t0) * 1e3)
        init_s.append(ledger.records()[-1].init_s * 1e3)
        cold = FunctionSpec(name=f"empty-cold-{i}", entrypoint=EMPTY, timeout_s=30)
        t0 = time.perf_counter()
        runtime.invoke(spec=cold, request=Message()).result()
        invoke_wall.append((time.perf_counter() - t0) * 1e3)
    return {"repeats": repeats, "spawn_to_ready_ms": ready_wall, "worker_init_ms": init_s,
            "cold_invoke_ms": invoke_wall}


def summary(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "runtime_latency.json")
    args = parser.parse_args()
    ledger = Ledger()
    runtime = LocalRuntime(ledger=ledger, capacity_cpus=2, max_workers=4 + 2 * args.cold, keep_alive_s=600)
    try:
        warm = warm_latency(runtime=runtime, calls=args.calls, repeats=args.repeats)
        cold = cold_start(runtime=runtime, ledger=ledger, repeats=args.cold)
    finally:
        runtime.shutdown()
    rows = [("warm invoke median (ms)", summary(warm["median_ms"])), ("warm invoke p90 (ms)", summary(warm["p90_ms"])),
            ("cold: spawn -> ready, driver (ms)", summary(cold["spawn_to_ready_ms"])),
            ("cold: worker init_s (ms)", summary(cold["worker_init_ms"])),
            ("cold: invoke end to end (ms)", summary(cold["cold_invoke_ms"]))]
    print(f"{'metric':38s} {'min':>9s} {'median':>9s} {'max':>9s}")
    for name, s in rows:
        print(f"{name:38s} {s['min']:9.3f} {s['median']:9.3f} {s['max']:9.3f}")
    goal_ok = summary(warm["median_ms"])["median"] <= 5.0
    print(f"goal warm median <= 5 ms: {'met' if goal_ok else 'NOT met'}")
    result = {"benchmark": "runtime_latency", "command": " ".join([Path(sys.executable).name] + sys.argv),
              "machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": os.cpu_count(), "processor": platform.processor()},
              "warm": warm, "cold": cold, "summary": {name: s for name, s in rows}, "goal_warm_median_ms": 5.0,
              "goal_met": goal_ok, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
