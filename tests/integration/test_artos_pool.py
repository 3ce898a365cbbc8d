"""ARTOS 4.3 in whole runs: pre-warming from the workload monitor (prewarm.mode: monitor) with a keep-alive short
enough that actor workers are reclaimed during the learner's update, and two workloads time-multiplexing one
device pool of CPU learner slots."""

from __future__ import annotations

from pathlib import Path

import torch

from nimbus.cost.ledger import Ledger
from nimbus.run.loop import train
from nimbus.run.workloads import train_workloads
from support import pool_ledger

# A learner update of ~0.4-0.6 s here (200 epochs; 60 took 0.13 s on a quiet machine, too short to reclaim
# anything); actors idle that long lose their worker at keep-alive 0.25 s.
COLD_ACTORS = ["algo.num_epochs=200", "runtime.keep_alive_s=0.25", "runtime.prewarm=false", "runtime.max_workers=8",
               "train.target_return=1000"]


def test_monitor_prewarms_actor_workers_once_the_workload_is_stable(make_config) -> None:
    torch.set_num_threads(1)
    # λ 1: stable on a busy 2-core machine too; a window of 3 rounds (not the default 5): 7 rounds left to act in
    config = make_config(overrides=[*COLD_ACTORS, "train.total_env_steps=2560", "prewarm.mode=monitor",
                                    "prewarm.stability=1.0", "prewarm.window=3"])
    result = train(config=config)
    rows = Ledger.load(path=result.run_dir / "ledger.jsonl")
    assert result.summary.rounds == 10
    prewarms = [r for r in rows if r.outcome == "prewarm" and r.function == "actor"]
    assert prewarms, "no actor worker was pre-warmed by the monitor (runtime.prewarm is off)"
    first_learner_end = min(r.end_at for r in rows if r.kind == "learner" and r.outcome == "ok")
    assert min(r.queued_at for r in prewarms) > first_learner_end  # asked for during the run, not at start-up
    cold_actor_attempts = [r for r in rows if r.function == "actor" and r.cold and r.outcome == "ok"]
    assert cold_actor_attempts, "the keep-alive was meant to reclaim actors (cold starts) before the monitor acts"


def test_monitor_off_prewarms_nothing(make_config) -> None:
    torch.set_num_threads(1)
    config = make_config(overrides=[*COLD_ACTORS, "train.total_env_steps=1536", "prewarm.mode=none",
                                    "prewarm.stability=1.0", "prewarm.window=3"])   # the monitor above would act
    rows = Ledger.load(path=train(config=config).run_dir / "ledger.jsonl")
    assert not [r for r in rows if r.outcome == "prewarm"]
    assert [r for r in rows if r.function == "actor" and r.cold and r.outcome == "ok"]  # cold starts did occur


def test_two_workloads_take_turns_on_one_cpu_learner_slot(make_two_workloads, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    train_workloads(configs=make_two_workloads(["train.total_env_steps=2048", "train.target_return=1000",
                                                "devices.pool=on_demand", "devices.kind=cpu", "devices.cpu_slots=1"]))
    pool = pool_ledger(tmp_path)
    learners = [r for r in pool if r.kind == "learner" and r.outcome == "ok"]
    assert {r.workload for r in learners} == {"cartA", "cartB"}
    assert all(r.device == "cpu:0" and r.lease_start_at is not None for r in learners)
    leases = sorted((r.lease_start_at, r.lease_end_at) for r in learners)
    assert all(end <= next_start for (_, end), (next_start, _) in zip(leases, leases[1:]))  # one slot, no overlap
    assert all(r.device == "" for r in pool if r.kind == "actor")
