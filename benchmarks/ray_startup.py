"""What the Ray backend costs before any work: start-up time and resident memory of a local Ray instance.

Each repeat runs in a fresh subprocess: ``import ray`` time, then ``connect_ray(address="local",
num_cpus=2)`` (nimbus's loopback-only start), then, once idle for ``--settle-s``, the memory of every
process Ray started (GCS, raylet, dashboard agent, runtime-env agent, log monitor, prestarted idle
workers...), summed from /proc: RSS (counts shared pages once per process: an upper bound) and PSS
(shared pages split between their users: the fair share). Then ``ray.shutdown()`` time. The first
cold start of a RayRuntime actor (a new worker process importing nothing heavy) is timed too.

Run:  python benchmarks/ray_startup.py [--repeats 3]   (writes benchmarks/results/ray_startup.json)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from _common import child_line, child_result, record, stats, write_result

REPO = Path(__file__).resolve().parents[1]


def child(*, settle_s: float) -> dict:
    started = time.perf_counter()
    import ray  # noqa: F401

    import_s = time.perf_counter() - started
    from nimbus.bench.procfs import descendants, memory_kib
    from nimbus.cost.ledger import Ledger
    from nimbus.data.codec import Message
    from nimbus.runtime.base import FunctionSpec, Resources
    from nimbus.runtime.ray_backend import RayRuntime
    from nimbus.runtime.ray_cluster import connect_ray

    start = connect_ray(address="local", num_cpus=2)
    time.sleep(settle_s)
    pids = descendants(os.getpid())
    rss, pss = map(sum, zip(*(memory_kib(pid) for pid in pids))) if pids else (0, 0)
    runtime = RayRuntime(ledger=Ledger(), address="local")
    spec = FunctionSpec(name="empty", entrypoint="nimbus.runtime.builtin:empty", resources=Resources(cpus=0.5))
    cold = time.perf_counter()
    runtime.invoke(spec=spec, request=Message()).result(timeout=120)
    cold_s = time.perf_counter() - cold
    warm = []
    for _ in range(20):
        tick = time.perf_counter()
        runtime.invoke(spec=spec, request=Message()).result(timeout=30)
        warm.append(time.perf_counter() - tick)
    runtime.shutdown()
    stop = time.perf_counter()
    ray.shutdown()
    return {"import_s": import_s, "init_s": start.seconds, "processes": len(pids), "rss_mib": rss / 1024,
            "pss_mib": pss / 1024, "first_cold_invoke_s": cold_s,
            "warm_invoke_ms_median": 1e3 * statistics.median(warm),
            "shutdown_s": time.perf_counter() - stop}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "ray_startup.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(child_line(child(settle_s=args.settle_s)), flush=True)
        return 0
    runs = []
    for repeat in range(args.repeats):
        load = os.getloadavg()[0]
        run = {**child_result(cmd=[sys.executable, __file__, "--child", "--settle-s", str(args.settle_s)], cwd=REPO,
                              timeout_s=300, what=f"repeat {repeat}"), "load_1m": load}
        runs.append(run)
        print(f"repeat {repeat}: import {run['import_s']:.2f} s, init {run['init_s']:.2f} s, {run['processes']} "
              f"processes, RSS {run['rss_mib']:.0f} MiB, PSS {run['pss_mib']:.0f} MiB, first cold invoke "
              f"{run['first_cold_invoke_s']:.2f} s, warm {run['warm_invoke_ms_median']:.2f} ms, shutdown "
              f"{run['shutdown_s']:.2f} s; load {load:.1f}", flush=True)
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float))]
    summary = {k: stats(r[k] for r in runs) for k in keys}
    result = {**record(benchmark="ray_startup"), "runs": runs, "summary": summary}
    print(f"wrote {write_result(path=args.out, result=result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
