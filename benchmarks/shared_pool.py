"""Two CartPole workloads on one pool vs the same two run one after the other (issue 11, Measure; ARTOS 6.2).

Both arms train the same two configs (the shipped PPO CartPole, seeds 0 and 1, ``train.target_return``
475 over 20 episodes, at most ``--max-steps`` env steps each) on a pool of ``--cpus`` CPUs:
* ``shared``: ``train_workloads([a, b])``: one driver, one pool, fair share (equal weights);
* ``sequential``: ``train(a)`` then ``train(b)``, each alone on the same pool size.
Reported per repeat: wall time until both reached 475 (shared: the later of the two; sequential: the
sum), the ratio shared / one alone (the mean of the sequential pair), and CPU-seconds held: the sum over
ledger rows of (billed seconds x CPUs), worker start-up included. ARTOS reports 2x the workloads on the
same CPUs for ~3 % more update time; the goal here: both done in < 1.6x the time of one alone.

CartPole-v1 because it reaches 475 within a few minutes here, so two workloads x two arms fit the budget.

Full figure (run alone; estimated 6-10 min on 2 quiet cores):
    python benchmarks/shared_pool.py --repeats 2             (writes benchmarks/results/shared_pool.json)
Smoke check (seconds):  python benchmarks/shared_pool.py --smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _common import write_result
from nimbus.config import NimbusConfig, apply_overrides, load_config, parse_config
from nimbus.cost.ledger import Ledger
from nimbus.run.loop import train
from nimbus.run.workloads import train_workloads

REPO = Path(__file__).resolve().parents[1]


def configs(*, root: Path, cpus: float, overrides: list[str]) -> list[NimbusConfig]:
    base = load_config(path=REPO / "configs" / "ppo-cartpole.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(root), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    common = [f"runtime.capacity_cpus={cpus}", "train.return_window=20", *overrides]
    return [parse_config(data=apply_overrides(data=base, overrides=[f"name=work{i}", f"seed={i}", *common]))
            for i in range(2)]


def cpu_seconds(*, ledger_path: Path) -> float:
    return sum(r.billed_s * r.cpus for r in Ledger.load(path=ledger_path))


def shared(*, root: Path, cpus: float, overrides: list[str]) -> dict:
    started = time.perf_counter()
    results = train_workloads(configs=configs(root=root, cpus=cpus, overrides=overrides))
    wall_s = time.perf_counter() - started
    pool = max(root.glob("pool-*"), key=lambda p: p.stat().st_mtime)
    return {"wall_s": wall_s, "reached": [r.summary.stopped_by == "target_return" for r in results],
            "env_steps": [r.summary.env_steps for r in results],
            "cpu_s": cpu_seconds(ledger_path=pool / "ledger.jsonl")}


def sequential(*, root: Path, cpus: float, overrides: list[str]) -> dict:
    walls, reached, steps, cpu = [], [], [], 0.0
    for config in configs(root=root, cpus=cpus, overrides=overrides):
        started = time.perf_counter()
        result = train(config=config)
        walls.append(time.perf_counter() - started)
        reached.append(result.summary.stopped_by == "target_return")
        steps.append(result.summary.env_steps)
        cpu += cpu_seconds(ledger_path=result.run_dir / "ledger.jsonl")
    return {"wall_s": sum(walls), "one_alone_s": statistics.mean(walls), "reached": reached, "env_steps": steps,
            "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cpus", type=float, default=2.0, help="the pool's capacity (runtime.capacity_cpus)")
    parser.add_argument("--max-steps", type=int, default=150_000, help="env steps per workload at most")
    parser.add_argument("--smoke", action="store_true", help="2 rounds per workload, one repeat (seconds)")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "shared_pool.json"))
    args = parser.parse_args()
    overrides = ["train.max_rounds=2"] if args.smoke else \
        [f"train.total_env_steps={args.max_steps}", "train.target_return=475"]
    repeats = 1 if args.smoke else args.repeats
    rows = []
    with tempfile.TemporaryDirectory(prefix="nimbus-shared-pool-") as tmp:
        for repeat in range(repeats):  # arms interleaved per repeat
            row = {"repeat": repeat,
                   "shared": shared(root=Path(tmp) / f"shared-{repeat}", cpus=args.cpus, overrides=overrides),
                   "sequential": sequential(root=Path(tmp) / f"seq-{repeat}", cpus=args.cpus, overrides=overrides)}
            row["shared_over_one_alone"] = row["shared"]["wall_s"] / row["sequential"]["one_alone_s"]
            row["shared_over_sequential"] = row["shared"]["wall_s"] / row["sequential"]["wall_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    report = {"cpus": args.cpus, "max_steps": args.max_steps, "runs": rows,
              "shared_over_one_alone_median": statistics.median(r["shared_over_one_alone"] for r in rows)}
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
    if not args.smoke:
        write_result(path=Path(args.output), result=report, indent=1)


if __name__ == "__main__":
    main()
