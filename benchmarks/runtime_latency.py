"""LocalRuntime latency: warm invocation of ``empty`` and a worker's cold start.

* warm: ``invoke(empty).result()`` one at a time on a warm worker, ``--calls`` calls per repeat; the
  median and p90 of each repeat, then min/median/max of those across ``--repeats`` repeats.
  Goal: median <= 5 ms.
* cold start: spawn -> entrypoint imported -> ready (``init_s`` the worker reports, and the wall time
  of ``prewarm(wait_s=...)`` as the driver sees it), plus a cold ``invoke`` end to end, ``--cold`` times,
  for each ``--start-methods`` (spawn: a fresh interpreter; fork_server: forked from a template that
  imported numpy/torch/gymnasium), of ``empty`` and of the PPO actor's entrypoint (imports torch and
  gymnasium). The template's own start (its first worker) is reported apart. Goal: <= 50 ms.
* time to round 0: ``nimbus train configs/ppo-cartpole.yaml`` as a subprocess, from launch to the
  start of round 0's first actor attempt (its ledger record), ``--round0`` times per start method.
  Goal: <= 1.5 s with the fork server.
* cold start as a user feels it (issue 25.9): from the request to the END of the first invocation, not to
  "ready". ``empty``: the wall time of a cold ``invoke(...).result()``. The PPO actor: ``nimbus train`` with
  ``runtime.prewarm=false`` (round 0's actors start cold), 2 rounds, ``--round0`` times per start method; from
  the ledger, per actor attempt, request (queued_at) → function start (ready) and → function end, for round 0's
  cold attempts and round 1's warm ones (the same work on a warm worker: the difference is the cold start).

Run:  python benchmarks/runtime_latency.py   (writes benchmarks/results/runtime_latency.json)
Smoke: python benchmarks/runtime_latency.py --calls 20 --repeats 1 --cold 1 --round0 1 --out /tmp/rl.json
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import record, write_result
from nimbus.cost.ledger import Ledger, LedgerRecord
from nimbus.data.codec import Message
from nimbus.onpolicy.workflow import ACTOR_ENTRYPOINT
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.forkserver import TRAINING_PRELOAD
from nimbus.runtime.local import LocalRuntime

EMPTY = "nimbus.runtime.builtin:empty"
ROOT = Path(__file__).resolve().parent.parent


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


def cold_start(*, runtime: LocalRuntime, ledger: Ledger, repeats: int, entrypoint: str) -> dict:
    """The first prewarm starts the template too (fork_server): reported as ``first_ready_ms``, not in the rest."""
    first = FunctionSpec(name="first", entrypoint=entrypoint, timeout_s=120)
    t0 = time.perf_counter()
    runtime.prewarm(spec=first, count=1, wait_s=120)
    first_ms = (time.perf_counter() - t0) * 1e3
    ready_wall, init_s, invoke_wall = [], [], []
    for i in range(repeats):
        spec = FunctionSpec(name=f"prewarm-{i}", entrypoint=entrypoint, timeout_s=120)
        t0 = time.perf_counter()
        runtime.prewarm(spec=spec, count=1, wait_s=120)
        ready_wall.append((time.perf_counter() - t0) * 1e3)
        init_s.append(ledger.records()[-1].init_s * 1e3)
        if entrypoint == EMPTY:  # the actor needs a real request: its cold invoke is not measured
            cold = FunctionSpec(name=f"cold-{i}", entrypoint=entrypoint, timeout_s=120)
            t0 = time.perf_counter()
            runtime.invoke(spec=cold, request=Message()).result()
            invoke_wall.append((time.perf_counter() - t0) * 1e3)
    return {"repeats": repeats, "entrypoint": entrypoint, "first_ready_ms": first_ms,
            "spawn_to_ready_ms": ready_wall, "worker_init_ms": init_s, "cold_invoke_ms": invoke_wall}


def time_to_round0(*, start_method: str, repeats: int, workdir: Path) -> list[float]:
    """Seconds from launching ``nimbus train`` to round 0's first actor attempt starting (2 rounds each)."""
    times = []
    for i in range(repeats):
        run_dir = workdir / f"{start_method}-{i}"
        launched = time.time()
        subprocess.run([str(Path(sys.executable).parent / "nimbus"), "train", str(ROOT / "configs/ppo-cartpole.yaml"),
                        "--set", "train.max_rounds=2", "--set", f"runtime.start_method={start_method}",
                        "--run-dir", str(run_dir)], check=True, stdout=subprocess.DEVNULL, cwd=workdir)
        records = [LedgerRecord.from_json(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
        times.append(min(r.start_at for r in records if r.kind == "actor" and r.outcome != "prewarm") - launched)
    return times


def first_invocation(*, start_method: str, repeats: int, workdir: Path) -> dict:
    """Request → ready and request → end of the invocation (ms) of the PPO actor, cold (round 0, no start-up
    pre-warming) and warm (round 1), from ``nimbus train`` runs' ledgers."""
    cold_ready, cold_end, warm_end = [], [], []
    for i in range(repeats):
        run_dir = workdir / f"first-{start_method}-{i}"
        subprocess.run([str(Path(sys.executable).parent / "nimbus"), "train", str(ROOT / "configs/ppo-cartpole.yaml"),
                        "--set", "train.max_rounds=2", "--set", "runtime.prewarm=false",
                        "--set", f"runtime.start_method={start_method}", "--run-dir", str(run_dir)],
                       check=True, stdout=subprocess.DEVNULL, cwd=workdir)
        records = [LedgerRecord.from_json(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
        actors = [r for r in records if r.kind == "actor" and r.outcome == "ok"]
        cold_ready += [(r.start_at - r.queued_at) * 1e3 for r in actors if r.cold]
        cold_end += [(r.end_at - r.queued_at) * 1e3 for r in actors if r.cold]
        warm_end += [(r.end_at - r.queued_at) * 1e3 for r in actors if not r.cold]
    return {"cold_request_to_ready_ms": cold_ready, "cold_request_to_end_ms": cold_end,
            "warm_request_to_end_ms": warm_end}


def summary(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def measure_start_method(*, start_method: str, args: argparse.Namespace) -> dict:
    ledger = Ledger()
    runtime = LocalRuntime(ledger=ledger, capacity_cpus=2, max_workers=8 + 4 * args.cold, keep_alive_s=600,
                           start_method=start_method, preload=TRAINING_PRELOAD)
    try:
        warm = warm_latency(runtime=runtime, calls=args.calls, repeats=args.repeats)
        cold = {name: cold_start(runtime=runtime, ledger=ledger, repeats=args.cold, entrypoint=entrypoint)
                for name, entrypoint in (("empty", EMPTY), ("actor", ACTOR_ENTRYPOINT))}
    finally:
        runtime.shutdown()
    with tempfile.TemporaryDirectory(prefix="nimbus-round0-") as workdir:
        round0 = time_to_round0(start_method=start_method, repeats=args.round0, workdir=Path(workdir))
        first = first_invocation(start_method=start_method, repeats=args.round0, workdir=Path(workdir))
    rows = [("warm invoke median (ms)", summary(warm["median_ms"])), ("warm invoke p90 (ms)", summary(warm["p90_ms"]))]
    for name, c in cold.items():
        rows += [(f"cold {name}: first worker ready (ms)", summary([c["first_ready_ms"]])),
                 (f"cold {name}: spawn -> ready, driver (ms)", summary(c["spawn_to_ready_ms"])),
                 (f"cold {name}: worker init_s (ms)", summary(c["worker_init_ms"]))]
        if c["cold_invoke_ms"]:
            rows.append((f"cold {name}: request -> end of first invocation (ms)", summary(c["cold_invoke_ms"])))
    rows += [("cold actor: request -> ready (ms)", summary(first["cold_request_to_ready_ms"])),
             ("cold actor: request -> end of first invocation (ms)", summary(first["cold_request_to_end_ms"])),
             ("warm actor: request -> end of invocation (ms)", summary(first["warm_request_to_end_ms"]))]
    rows.append(("nimbus train -> round 0 (ms)", summary([t * 1e3 for t in round0])))
    return {"warm": warm, "cold": cold, "round0_s": round0, "first_invocation": first,
            "summary": {name: s for name, s in rows}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--round0", type=int, default=3, help="nimbus train runs per start method")
    parser.add_argument("--start-methods", default="spawn,fork_server")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "runtime_latency.json")
    args = parser.parse_args()
    results = {m: measure_start_method(start_method=m, args=args) for m in args.start_methods.split(",")}
    print(f"{'metric':54s} {'min':>9s} {'median':>9s} {'max':>9s}")
    for method, res in results.items():
        print(f"-- start_method: {method}")
        for name, s in res["summary"].items():
            print(f"{name:54s} {s['min']:9.3f} {s['median']:9.3f} {s['max']:9.3f}")
    goals = {"warm median <= 5 ms": all(r["summary"]["warm invoke median (ms)"]["median"] <= 5.0
                                        for r in results.values())}
    if "fork_server" in results:
        fs = results["fork_server"]["summary"]
        goals["cold start (actor, forked) <= 50 ms"] = fs["cold actor: worker init_s (ms)"]["median"] <= 50.0
        goals["nimbus train -> round 0 <= 1.5 s"] = fs["nimbus train -> round 0 (ms)"]["median"] <= 1500.0
    for goal, met in goals.items():
        print(f"goal {goal}: {'met' if met else 'NOT met'}")
    head = record(benchmark="runtime_latency")
    head["machine"]["processor"] = platform.processor()
    result = {**head, "start_methods": results, "goals": goals}
    print(f"wrote {write_result(path=args.out, result=result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
