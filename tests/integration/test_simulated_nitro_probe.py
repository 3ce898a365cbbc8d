"""A simulated Nitro run (PPO CartPole, ``actors.scaling.kind: nitro``) with a ``probe`` model: each round's
``probe_s`` is the probe's own simulated seconds and ``probe_share`` (Nitro §8.7's < 5 % goal) is probe_s over the
round, not 1 as when every ``*_s`` was the learner's whole duration (docs/simulated.md, "What the rows and the bill
mean here")."""

from __future__ import annotations

import pytest

from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train

SIM = ["runtime.backend=simulated", "runtime.prewarm=false", "runtime.max_workers=null", "train.max_rounds=3",
       "train.total_env_steps=1000000", "train.target_return=1000",
       "actors.scaling={kind: nitro, min_actors: 2, max_actors: 4, hessian: {max_iterations: 10}}",
       "simulation.functions.actor.median_s=0.5", "simulation.functions.actor.cold_start_s=0.0",
       "simulation.functions.learner.median_s=1.0", "simulation.functions.learner.cold_start_s=0.0"]


def test_a_simulated_nitro_round_reports_the_probe_apart(make_config) -> None:
    result = train(config=make_config(overrides=[*SIM, "simulation.functions.probe.median_s=0.05"]))
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert [row["extras"]["probe_s"] for row in rows] == [0.05] * 3
    assert [row["learning_s"] for row in rows] == [pytest.approx(1.05)] * 3     # the update, then the probe
    assert [row["extras"]["probe_share"] for row in rows] == [pytest.approx(0.05 / 1.55)] * 3   # 0.5 + 1.05 s rounds
