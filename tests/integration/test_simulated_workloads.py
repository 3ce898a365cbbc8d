"""Several workloads on one pool (run/workloads.py) on ``runtime.backend: simulated``: two PPO CartPole workloads
share one simulated device (``devices: {pool: on_demand, cpu_slots: 1}``), their functions run in one simulated-time
order, each keeps its own rows and ledger, and two runs are bitwise equal (docs/simulated.md, "Several workloads on
one pool"). The real-backend counterparts: tests/integration/test_workloads.py, test_artos_pool.py.

Constant durations: actors 1 s, learners 3 s, no cold start, no CPU limit. Alone, a round is 1 + 3 = 4 s. Sharing
one device, the learners take turns on it: A's first learner holds it 1-4 while B's waits, then B's 4-7 while A's
second round's actors run 4-5 and its learner waits until 7, and so on: A's rounds end at 4, 10, 16 and B's at 7,
13, 19, so every round after the first takes 6 s (two learners of 3 s on one device)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.cost.pricing import load_pricing
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.run.workloads import train_workloads
from support import ledger_rows, pool_ledger

SIM = ["runtime.backend=simulated", "runtime.prewarm=false", "runtime.max_workers=null", "train.max_rounds=3",
       "train.total_env_steps=1000000", "train.target_return=1000",
       "simulation.functions.actor.median_s=1.0", "simulation.functions.actor.cold_start_s=0.0",
       "simulation.functions.learner.median_s=3.0", "simulation.functions.learner.cold_start_s=0.0"]
ONE_DEVICE = ["devices.pool=on_demand", "devices.cpu_slots=1"]


def _pair(make_two_workloads, *, root: Path, extra: list[str]) -> list:
    return train_workloads(configs=make_two_workloads([*SIM, *extra, f"output.root_dir={root}"]))


@pytest.mark.timeout(240)   # today's main: the members' plain queue.Queue never advances the clock (a hang)
def test_two_workloads_take_turns_on_one_simulated_device_in_simulated_time(make_two_workloads, tmp_path: Path) -> None:
    results = _pair(make_two_workloads, root=tmp_path / "one", extra=ONE_DEVICE)
    rows = [read_metrics(path=r.run_dir / "metrics.jsonl") for r in results]
    assert [[row["round_s"] for row in own] for own in rows] == [[4.0, 6.0, 6.0], [7.0, 6.0, 6.0]]
    assert [[row["wall_s"] for row in own] for own in rows] == [[4.0, 10.0, 16.0], [7.0, 13.0, 19.0]]
    assert [r.summary.wall_s for r in results] == [19.0, 19.0]          # the pool's wall time, simulated
    leases = {}
    for result, name in zip(results, ("cartA", "cartB")):
        own = ledger_rows(result.run_dir)
        assert {r["workload"] for r in own} == {name}                 # each workload's own ledger
        learners = [r for r in own if r["kind"] == "learner" and r["outcome"] == "ok"]
        leases[name] = [(r["device"], r["lease_start_at"], r["lease_end_at"]) for r in learners]
        assert all(r["billed_s"] == 3.0 for r in learners)
        assert not [r for r in own if r["start_at"] >= learners[-1]["end_at"]]   # a stopped workload holds nothing
    assert leases == {"cartA": [("cpu:0", 1.0, 4.0), ("cpu:0", 7.0, 10.0), ("cpu:0", 13.0, 16.0)],
                      "cartB": [("cpu:0", 4.0, 7.0), ("cpu:0", 10.0, 13.0), ("cpu:0", 16.0, 19.0)]}
    pricing = load_pricing(path=None)
    pool = pool_ledger(tmp_path / "one")
    assert sum(r.summary.serverless_cost_usd for r in results) == \
        pytest.approx(sum(pricing.cost_usd(record=r) for r in pool))   # the workloads' bills sum to the pool's

    again = _pair(make_two_workloads, root=tmp_path / "two", extra=ONE_DEVICE)
    for first, second in zip(results, again):
        assert (first.run_dir / "metrics.jsonl").read_text() == (second.run_dir / "metrics.jsonl").read_text()


@pytest.mark.timeout(240)
def test_without_a_device_limit_each_workload_runs_as_it_would_alone(make_two_workloads, make_config,
                                                                      tmp_path: Path) -> None:
    results = _pair(make_two_workloads, root=tmp_path / "pair", extra=[])
    alone = train(config=make_config(overrides=[*SIM, "name=cartA", "seed=0"]), run_dir=tmp_path / "alone")
    paired = read_metrics(path=results[0].run_dir / "metrics.jsonl")
    assert [row["round_s"] for row in paired] == [4.0, 4.0, 4.0]
    strip = ("wall_s", "runtime")   # the pool's own counters (workers, starts) count both workloads' functions
    alone_rows = read_metrics(path=alone.run_dir / "metrics.jsonl")
    assert [{k: v for k, v in row.items() if k not in strip} for row in paired] == \
        [{k: v for k, v in row.items() if k not in strip} for row in alone_rows]


@pytest.mark.timeout(240)
def test_the_workloads_share_weights_divide_a_cpu_limit_by_fair_share(make_two_workloads, tmp_path: Path) -> None:
    """4 actors each (1 s, 1 CPU) on 2 CPUs at equal ``runtime.share_weight``: each workload holds one CPU, so each
    one's actors start at 0, 1, 2, 3 (FIFO would have run A's four at 0, 0, 1, 1 first); both learners then run 4-7."""
    results = _pair(make_two_workloads, root=tmp_path / "fair", extra=[
        "runtime.capacity_cpus=2", "actors.scaling.num_actors=4", "train.max_rounds=1"])
    for result in results:
        own = ledger_rows(result.run_dir)
        assert sorted(r["start_at"] for r in own if r["kind"] == "actor") == [0.0, 1.0, 2.0, 3.0]
        assert [(r["start_at"], r["end_at"]) for r in own if r["kind"] == "learner"] == [(4.0, 7.0)]
