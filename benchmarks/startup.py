"""A one-round `nimbus train` against the import floor, whole processes: how much start-up nimbus adds.

Pairs, interleaved (the machine is shared): the floor ``python -c "import torch, gymnasium"`` and
``nimbus train configs/ppo-cartpole.yaml`` for one round (``train.max_rounds=1``, no final evaluation, no report,
no status line; TensorBoard as shipped), each a fresh process timed from spawn to exit. Reported per arm: min /
median / max wall seconds, the ratio of the medians (goal: <= 1.6) and each pair's ratio; for nimbus also round 0's
stages from its ledger: seconds from spawn to round 0's first actor dispatch, to round 0's learner end, and from
there to the process's exit (report, summary, shutdown).

Run:  python benchmarks/startup.py [--pairs 5] [--config configs/ppo-cartpole.yaml] [--set KEY=VALUE ...]
      (writes benchmarks/results/startup.json; ~5 pairs x ~6 s on 2 idle cores)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import RunUsage, record, stats, versions, write_result

REPO = Path(__file__).resolve().parents[1]
FLOOR = [sys.executable, "-c", "import torch, gymnasium"]


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, the epoch time the process was spawned)."""
    spawned, started = time.time(), time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, spawned


def one_round(*, config: str, overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="nimbus-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "nimbus.cli", "train", config, "--run-dir", str(run_dir),
               *[arg for override in ["train.max_rounds=1", "train.eval_episodes=0", "output.report=false",
                                      "output.status_line=false", *overrides] for arg in ("--set", override)]]
        wall_s, spawned = timed(cmd)
        ledger = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    invoked = [r for r in ledger if r["outcome"] != "prewarm"]
    dispatched = min(r["queued_at"] for r in invoked if r["function"] == "actor") - spawned
    learned = max(r["end_at"] for r in invoked if r["function"] == "learner") - spawned
    return {"wall_s": wall_s, "to_round0_dispatch_s": dispatched, "to_round0_end_s": learned,
            "after_round0_s": wall_s - learned}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--config", default="configs/ppo-cartpole.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "startup.json")
    args = parser.parse_args()
    pairs = []
    for pair in range(args.pairs):
        usage = RunUsage.start()
        floor_s = timed(FLOOR)[0]
        nimbus = one_round(config=args.config, overrides=args.set)
        pairs.append({"floor_s": floor_s, **nimbus, "ratio": nimbus["wall_s"] / floor_s, **usage.fields(cpu=False)})
        print(f"pair {pair}: floor {floor_s:.2f} s, nimbus {nimbus['wall_s']:.2f} s (round 0 dispatched at "
              f"{nimbus['to_round0_dispatch_s']:.2f} s, ended at {nimbus['to_round0_end_s']:.2f} s, then "
              f"{nimbus['after_round0_s']:.2f} s to exit)", flush=True)
    summary = {key: stats(p[key] for p in pairs)
               for key in ("floor_s", "wall_s", "to_round0_dispatch_s", "to_round0_end_s", "after_round0_s")}
    summary["ratio_of_medians"] = summary["wall_s"]["median"] / summary["floor_s"]["median"]
    write_result(path=args.out, result={**record(benchmark="startup"), "versions": versions(modules=("torch",)),
                                        "config": args.config, "overrides": args.set, "pairs": pairs,
                                        "summary": summary, "goal_ratio": 1.6})
    print(f"one-round nimbus train / import floor, medians: {summary['ratio_of_medians']:.2f} (goal <= 1.6); "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
