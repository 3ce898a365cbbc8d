"""The ``offpolicy`` workflow (DQN, IMPALA) on ``runtime.backend: simulated``: it learns, two runs give the
same metrics bitwise, the policy lag follows the simulated duration model (the clock orders fragments and updates),
and injected deaths count each fragment once (docs/simulated.md, "Off-policy")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from support import ledger_rows

SIM = ["runtime.backend=simulated"]
CONSTANT = ["simulation.functions.actor.cold_start_s=0", "simulation.functions.learner.cold_start_s=0"]


def _lags(run_dir: Path) -> dict[int, int]:
    lags = json.loads((run_dir / "policy_lag.json").read_text())["policy_lag_rows"]
    return {int(lag): rows for lag, rows in lags.items()}


@pytest.mark.slow
def test_simulated_impala_learns_cartpole_above_random(make_shipped_config) -> None:
    config = make_shipped_config("impala-cartpole", overrides=[*SIM, "train.total_env_steps=30000",
                                                               "train.target_return=100"])
    result = train(config=config)
    assert result.summary.stopped_by == "target_return", result.summary   # random play: about 22
    assert result.summary.final_return >= 100


def test_two_simulated_async_runs_give_the_same_rows_bitwise(make_shipped_config, tmp_path: Path) -> None:
    lines = []
    for run in ("a", "b"):
        config = make_shipped_config("dqn-cartpole", overrides=[
            *SIM, "train.max_rounds=6", "algo.learning_starts=256", "algo.hidden_sizes=[32]",
            "actors.scaling.num_actors=4", "simulation.functions.actor.distribution=lognormal",
            "simulation.functions.actor.sigma=0.5", "simulation.functions.actor.failure_fraction=0.2"])
        result = train(config=config, run_dir=tmp_path / run)
        lines.append((result.run_dir / "metrics.jsonl").read_text())
        assert any(r["outcome"] == "worker_died" for r in ledger_rows(result.run_dir))
    assert lines[0] == lines[1] and len(lines[0].splitlines()) == 6


def _lag_run(make_shipped_config, *, actors: int, run_dir: Path) -> tuple[list[dict], int]:
    config = make_shipped_config("impala-cartpole", overrides=[
        *SIM, *CONSTANT, "train.max_rounds=30", "env.num_envs_per_actor=1", f"actors.scaling.num_actors={actors}",
        "offpolicy.sync_to=all", "offpolicy.max_steps_ahead=null",
        "simulation.functions.actor.distribution=lognormal", "simulation.functions.actor.sigma=0.3",
        "simulation.functions.actor.median_s=1.0", "simulation.functions.learner.median_s=0.5"])
    result = train(config=config, run_dir=run_dir)
    lost = json.loads((result.run_dir / "policy_lag.json").read_text())["lost_fragments"]
    return read_metrics(path=result.run_dir / "metrics.jsonl"), lost


def test_policy_lag_grows_with_many_actors_and_a_slow_learner_in_simulated_time(make_shipped_config,
                                                                                tmp_path: Path) -> None:
    """Actors take about 1 s a fragment (lognormal), the learner 0.5 s an update (one fragment). One actor: the
    learner keeps up, and a fragment is consumed about one update after the version that collected it. Eight
    actors: 8 fragments a second against 2 updates; the FIFO (4 fragments an actor: 32) fills and drops its
    oldest, so a consumed fragment waited about 32 / 8 = 4 s there after its 1 s of collection: about 10 updates
    old. Only the simulated clock orders them so (delivered in dispatch order, the numbers differ)."""
    one, lost_one = _lag_run(make_shipped_config, actors=1, run_dir=tmp_path / "one")
    many, lost_many = _lag_run(make_shipped_config, actors=8, run_dir=tmp_path / "many")
    lag_one = [r["extras"]["policy_lag_mean"] for r in one[-10:]]
    lag_many = [r["extras"]["policy_lag_mean"] for r in many[-10:]]
    assert max(lag_one) <= 2 and min(lag_many) >= 8, (lag_one, lag_many)
    assert lost_one == 0 and lost_many > 0
    # the clock acts: each update takes its simulated 0.5 s; with eight actors the learner never idles
    assert all(r["extras"]["learner_call_s"] == pytest.approx(0.5) for r in one + many)
    assert [b["wall_s"] - a["wall_s"] for a, b in zip(many, many[1:])] == pytest.approx([0.5] * 29)


def test_injected_deaths_are_retried_and_each_fragment_counts_once(make_shipped_config) -> None:
    config = make_shipped_config("impala-cartpole", overrides=[
        *SIM, "train.total_env_steps=2400", "env.num_envs_per_actor=2", "actors.scaling.num_actors=3",
        "simulation.functions.actor.failure_fraction=0.3", "simulation.functions.learner.failure_fraction=0.2"])
    result = train(config=config)
    ledger = [r for r in ledger_rows(result.run_dir) if r["outcome"] != "prewarm"]
    died = [r for r in ledger if r["outcome"] == "worker_died"]
    actors_ok = [r for r in ledger if r["function"] == "actor" and r["outcome"] == "ok"]
    assert {r["function"] for r in died} == {"actor", "learner"} and result.summary.retries == len(died)
    assert result.summary.env_steps == 2400 == 40 * len(actors_ok)   # 2 envs x 20 steps, each accepted once
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    consumed = sum(_lags(result.run_dir).values())
    assert consumed == 40 * len(rows)   # one fragment per update, each update counted once


def test_a_time_triggered_learner_fires_every_period_of_simulated_time(make_shipped_config) -> None:
    """``learner_trigger: time``: the loop's 20 ms waits end in simulated time, so the trigger is polled between the
    actors' 1 s fragments and a 0.1 s learner starts every 0.3 s (at most one 20 ms wait late), not at the next
    fragment's delivery."""
    config = make_shipped_config("dqn-cartpole", overrides=[
        *SIM, *CONSTANT, "train.max_rounds=8", "algo.learning_starts=256", "algo.hidden_sizes=[32]",
        "offpolicy.learner_trigger=time", "offpolicy.learner_period_s=0.3",
        "simulation.functions.actor.median_s=1.0", "simulation.functions.learner.median_s=0.1"])
    result = train(config=config)
    starts = [r["start_at"] for r in ledger_rows(result.run_dir) if r["function"] == "learner" and r["outcome"] == "ok"]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert len(starts) == 8 and all(0.3 - 1e-9 <= gap < 0.32 + 1e-9 for gap in gaps), gaps


@pytest.mark.parametrize("variant", ["sac", "impact", "lockstep"])
def test_sac_impact_heard_from_and_lockstep_run_on_the_simulated_clock(make_shipped_config, variant: str) -> None:
    name, rounds, overrides = {
        "sac": ("sac-pendulum", 4, ["algo.hidden_sizes=[32, 32]"]),
        "impact": ("impala-cartpole", 6, ["algo.variant=impact", "actors.scaling.num_actors=3"]),
        "lockstep": ("dqn-cartpole", 3, ["algo.learning_starts=256", "algo.hidden_sizes=[32]",
                                         "offpolicy.lockstep=true"]),
    }[variant]
    result = train(config=make_shipped_config(name, overrides=[*SIM, f"train.max_rounds={rounds}", *overrides]))
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert [r["policy_version"] for r in rows] == list(range(1, rounds + 1))
    ledger = [r for r in ledger_rows(result.run_dir) if r["outcome"] == "ok"]
    learners = [r for r in ledger if r["function"] == "learner"]
    actors = [r for r in ledger if r["function"] == "actor"]
    overlaps = [a for a in actors for b in learners if a["start_at"] < b["end_at"] and b["start_at"] < a["end_at"]]
    if variant == "impact":
        assert all(r["extras"]["actors_heard_from"] == 1 for r in rows)   # XingTian: v+1 goes to one actor
    assert bool(overlaps) == (variant != "lockstep")   # simulated times: lockstep alternates, async overlaps
