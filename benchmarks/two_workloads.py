"""Two workloads on one device pool vs each holding its own learner slot (issue 14, Measure; ARTOS Fig. 14).

Both arms train the same two PPO CartPole workloads (seeds 0 and 1, ``--rounds`` rounds each) together on one
pool (``nimbus train a.yaml b.yaml``, run/workloads.py) with the device pool over CPU learner slots:
* ``pool``: ``devices: {pool: on_demand, kind: cpu, cpu_slots: 1}``: the two learners take turns on one slot,
  each holding it only for an update; its held time is the sum of the ledger's leases;
* ``own``: ``cpu_slots: 2``, one slot per workload, held for the workload's whole run (a Ray-style reservation,
  as the learner actor holds its resources in the seed systems): its held time is the workload's span in the
  ledger (first request to last result).
Actors are billed identically in both arms (ledger: billed seconds x CPUs). Reported per repeat: learner-slot
seconds held, CPU-seconds held (slots x the learner's CPUs + actors), wall time, and pool / own. Arms are
interleaved (order alternating per repeat). ARTOS: ~55 % of Ray's CPU time.

Full figure (run alone; estimated 6-10 min on 2 quiet cores; set --kind cuda on a GPU machine):
    python benchmarks/two_workloads.py --repeats 3     (writes benchmarks/results/two_workloads.json)
Smoke check (< 60 s):  python benchmarks/two_workloads.py --smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from _common import write_result
from nimbus.config import NimbusConfig, apply_overrides, load_config, parse_config
from nimbus.cost.ledger import Ledger, LedgerRecord
from nimbus.run.workloads import train_workloads

REPO = Path(__file__).resolve().parents[1]


def configs(*, root: Path, slots: int, args: argparse.Namespace, rounds: int) -> list[NimbusConfig]:
    base = load_config(path=REPO / "configs" / "ppo-cartpole.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(root), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    common = [f"runtime.capacity_cpus={args.cpus}", f"train.max_rounds={rounds}", "train.total_env_steps=10000000",
              "train.target_return=100000", "devices.pool=on_demand", f"devices.kind={args.kind}",
              f"devices.cpu_slots={slots}", f"algo.num_epochs={args.epochs}"]
    return [parse_config(data=apply_overrides(data=base, overrides=[f"name=work{i}", f"seed={i}", *common]))
            for i in range(2)]


def held(*, rows: list[LedgerRecord], arm: str) -> dict:
    """Learner-slot seconds and CPU-seconds held, from the pool's ledger."""
    learners = [r for r in rows if r.lease_start_at is not None]
    learner_cpus = max((r.cpus for r in learners), default=1.0)
    if arm == "pool":
        slot_s = sum(r.lease_end_at - r.lease_start_at for r in learners)
    else:  # each workload holds its slot from its first request to its last result
        slot_s = 0.0
        for workload in {r.workload for r in rows}:
            own = [r for r in rows if r.workload == workload]
            slot_s += max(r.end_at for r in own) - min(r.queued_at for r in own)
    actor_cpu_s = sum(r.billed_s * r.cpus for r in rows if r.lease_start_at is None)
    return {"learner_slot_s": slot_s, "actor_cpu_s": actor_cpu_s, "held_cpu_s": slot_s * learner_cpus + actor_cpu_s,
            "leases": len(learners), "workloads": sorted({r.workload for r in learners})}


def one_run(*, root: Path, arm: str, args: argparse.Namespace, rounds: int) -> dict:
    started = time.perf_counter()
    train_workloads(configs=configs(root=root, slots=1 if arm == "pool" else 2, args=args, rounds=rounds))
    wall_s = time.perf_counter() - started
    rows = Ledger.load(path=next(root.glob("pool-*")) / "ledger.jsonl")
    return {"arm": arm, "wall_s": wall_s, **held(rows=rows, arm=arm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=40, help="rounds per workload")
    parser.add_argument("--epochs", type=int, default=20, help="PPO epochs per update")
    parser.add_argument("--cpus", type=float, default=2.0, help="the pool's capacity (runtime.capacity_cpus)")
    parser.add_argument("--kind", choices=("cpu", "cuda"), default="cpu", help="devices.kind")
    parser.add_argument("--smoke", action="store_true", help="one repeat of 3 rounds per workload (< 60 s)")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "two_workloads.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    repeats, rounds = (1, 3) if args.smoke else (args.repeats, args.rounds)
    runs = []
    with tempfile.TemporaryDirectory(prefix="nimbus-two-workloads-") as tmp:
        for repeat in range(repeats):
            for arm in (("own", "pool") if repeat % 2 == 0 else ("pool", "own")):  # interleaved, order alternating
                run = {"repeat": repeat,
                       **one_run(root=Path(tmp) / f"{arm}-{repeat}", arm=arm, args=args, rounds=rounds)}
                runs.append(run)
                print(json.dumps(run), flush=True)
    ratios = [pool["held_cpu_s"] / own["held_cpu_s"] for pool, own in
              zip([r for r in runs if r["arm"] == "pool"], [r for r in runs if r["arm"] == "own"])]
    report = {"rounds": rounds, "epochs": args.epochs, "cpus": args.cpus, "kind": args.kind, "runs": runs,
              "held_cpu_s_pool_over_own": ratios, "held_cpu_s_pool_over_own_median": statistics.median(ratios)}
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
    if not args.smoke:
        write_result(path=Path(args.output), result=report, indent=1)


if __name__ == "__main__":
    main()
