"""Several workloads on one pool (run/workloads.py): each its own run dir, ledger rows tagged with their
workload and summing to the pool's, both learn. The learning run is inline (runtime/inline.py: one pool in the
driver, the same numbers as forked workers); two workloads taking turns on forked workers: test_artos_pool.py,
on Ray: test_ray_workloads.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import load_pricing
from nimbus.errors import ConfigError
from nimbus.run.workloads import train_workloads
from support import pool_ledger


def test_duplicate_workload_names_are_refused_before_anything_starts(make_config) -> None:
    config = make_config(overrides=["name=same"])
    with pytest.raises(ConfigError, match="name: duplicate workload name 'same'"):
        train_workloads(configs=[config, config])


@pytest.mark.slow
def test_two_cartpole_workloads_on_one_pool_both_learn_and_bill_separately(make_two_workloads, tmp_path: Path) -> None:
    # learning: a 20-episode mean of 100, where random play scores about 22 (measured: 4 352 and 4 864 env steps;
    # 195 took 14 336 and 11 776, twice the test's time for no other claim)
    configs = make_two_workloads(["train.total_env_steps=60000", "train.target_return=100", "train.return_window=20",
                                  "runtime.backend=inline"])
    results = train_workloads(configs=configs)
    assert [r.summary.final_return >= 100 for r in results] == [True, True], [r.summary for r in results]
    pool_dir = next(tmp_path.glob("pool-*"))
    pool = pool_ledger(tmp_path)
    assert {r.workload for r in pool} == {"cartA", "cartB"}
    assert {r.function for r in pool} == {"cartA/actor", "cartA/learner", "cartB/actor", "cartB/learner"}
    pricing = load_pricing(path=None)
    costs = []
    for result, name in zip(results, ("cartA", "cartB")):
        own = Ledger.load(path=result.run_dir / "ledger.jsonl")
        assert own and {r.workload for r in own} == {name}
        assert len(own) == sum(r.workload == name for r in pool)
        costs.append(result.summary.serverless_cost_usd)
        assert result.summary.serverless_cost_usd == pytest.approx(sum(pricing.cost_usd(record=r) for r in own))
        assert (result.run_dir / "metrics.jsonl").exists() and list((result.run_dir / "checkpoints").iterdir())
    assert sum(costs) == pytest.approx(sum(pricing.cost_usd(record=r) for r in pool))
    assert json.loads((pool_dir / "workloads.json").read_text())["workloads"].keys() == {"cartA", "cartB"}
