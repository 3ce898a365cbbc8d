"""Two workloads on one Ray pool (run/workloads.py with runtime.backend: ray): the same configs as on the
local backend, each workload its own run dir and ledger, every row tagged, the pool's rows the sum."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger
from nimbus.run.workloads import train_workloads
from support import pool_ledger

pytestmark = pytest.mark.ray
ON_RAY = ["runtime.backend=ray", "actors.function.cpus=0.5", "learner.function.cpus=0.5", "train.max_rounds=2",
          "algo.minibatch_size=64",
          "actors.scaling={kind: fixed, num_actors: 1}"]


def test_two_workloads_share_one_ray_pool_with_their_own_ledgers(ray_local, make_config, tmp_path: Path) -> None:
    configs = [make_config(overrides=[f"name={name}", f"seed={seed}", *ON_RAY])
               for name, seed in (("rayA", 0), ("rayB", 1))]
    results = train_workloads(configs=configs)
    assert [r.summary.rounds for r in results] == [2, 2]
    pool = pool_ledger(tmp_path)
    assert {r.function for r in pool if r.outcome == "ok"} == {"rayA/actor", "rayA/learner", "rayB/actor",
                                                                "rayB/learner"}
    for result, name in zip(results, ("rayA", "rayB")):
        own = Ledger.load(path=result.run_dir / "ledger.jsonl")
        assert {r.workload for r in own} == {name} and len(own) == sum(r.workload == name for r in pool)
