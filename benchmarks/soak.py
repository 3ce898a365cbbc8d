"""Soak (RELIABILITY.md P13): does a long run keep its memory, shared memory and file descriptors flat?

Runs ``nimbus train CONFIG`` (PPO CartPole by default: the shortest rounds, so the most messages,
segments, store versions and ledger rows per minute) with no step limit, samples every ``--sample-s``:
RSS and PSS of the driver and every process under it (/proc), the bytes of the run's shared-memory
segments (/dev/shm/nimbus_<driver pid>_*), the driver's open file descriptors, and the rounds done.
After ``--minutes`` it sends SIGINT (the run checkpoints and exits 0) and checks that nothing is left:
no process under the driver, no segment of the run.

Reported: each series at 25 % / 50 % / 100 % of the run, and the least-squares slope over the second
half (MiB per hour for memory; the first half covers warm-up: imports, allocator pools, caches).

Run:  python benchmarks/soak.py [--minutes 10] [--config configs/ppo-cartpole.yaml]
      (writes benchmarks/results/soak.json)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import write_result
from nimbus.bench.procfs import descendants, memory_kib, open_fds
from nimbus.bench.transfer import environment

REPO = Path(__file__).resolve().parents[1]
SHM = Path("/dev/shm")


def sample(*, pid: int, run_dir: Path, started: float, shm_base: str) -> dict:
    pids = [pid, *descendants(pid)]
    rss, pss = map(sum, zip(*(memory_kib(p) for p in pids)))
    shm = sum(f.stat().st_size for f in SHM.glob(f"{shm_base}*") if f.is_file())
    metrics = run_dir / "metrics.jsonl"
    rounds = sum(1 for _ in metrics.open()) if metrics.exists() else 0
    return {"t_s": time.monotonic() - started, "processes": len(pids), "rss_mib": rss / 1024, "pss_mib": pss / 1024,
            "shm_mib": shm / 2**20, "driver_fds": open_fds(pid), "rounds": rounds}


def summarise(samples: list[dict]) -> dict:
    def at(fraction: float, key: str) -> float:
        return samples[min(len(samples) - 1, int(fraction * (len(samples) - 1)))][key]

    second = samples[len(samples) // 2:]
    hours = np.array([s["t_s"] for s in second]) / 3600
    out = {}
    for key in ("rss_mib", "pss_mib", "shm_mib", "driver_fds", "processes"):
        values = np.array([s[key] for s in second], dtype=float)
        slope = float(np.polyfit(hours, values, 1)[0]) if len(second) >= 3 else float("nan")
        out[key] = {"at_25": at(0.25, key), "at_50": at(0.5, key), "at_100": at(1.0, key),
                    "second_half_slope_per_hour": slope}
    out["rounds"] = samples[-1]["rounds"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--config", default=str(REPO / "configs" / "ppo-cartpole.yaml"))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "soak.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        command = [sys.executable, "-m", "nimbus.cli", "train", args.config, "--run-dir", str(run_dir),
                   "--set", "train.total_env_steps=1000000000000", "--set", "train.eval_episodes=0",
                   "--set", "output.loggers=[tensorboard]", "--set", "output.report=false",
                   "--set", "output.status_line=false", "--set", "train.checkpoint_every_rounds=200"]
        shm_base = f"nimbus_soak{os.getpid()}_"  # the driver claims its own prefix under this base
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "NIMBUS_SHM_PREFIX": shm_base})
        started, samples = time.monotonic(), []
        while time.monotonic() - started < 60 * args.minutes and proc.poll() is None:
            time.sleep(args.sample_s)
            samples.append(sample(pid=proc.pid, run_dir=run_dir, started=started, shm_base=shm_base))
            last = samples[-1]
            print(f"{last['t_s']:7.0f} s  rounds {last['rounds']:6d}  PSS {last['pss_mib']:7.1f} MiB  "
                  f"RSS {last['rss_mib']:7.1f} MiB  shm {last['shm_mib']:6.1f} MiB  fds {last['driver_fds']:4d}  "
                  f"procs {last['processes']}", flush=True)
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended on its own (exit {proc.returncode}):\n{proc.stderr.read()[-3000:]}")
        os.kill(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
        leftovers = {"processes": descendants(proc.pid), "segments": [f.name for f in SHM.glob(f"{shm_base}*")]}
        summary = summarise(samples)
    out = {"summary": summary, "exit_code": code, "leftovers": leftovers, "samples": samples,
           "minutes": args.minutes, "config": args.config, "environment": environment()}
    write_result(path=args.out, result=out, indent=1)
    print(json.dumps({"summary": summary, "exit_code": code, "leftovers": leftovers}, indent=1))
    return 0 if code == 0 and not leftovers["processes"] and not leftovers["segments"] else 1


if __name__ == "__main__":
    sys.exit(main())
