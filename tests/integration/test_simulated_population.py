"""Populations on ``runtime.backend: simulated`` (docs/simulated.md): PBT's members and a ``policies:`` population
share one simulated pool; run/members.py drives them on the runtime's event queue and clock, so the run is
deterministic for its seed and its wall time is simulated. The real-backend counterparts: tests/integration/
test_pbt.py and test_policies.py.

Constant durations: actors 1 s, learners 3 s, no cold start, no CPU limit, so every member's round is 1 + 3 = 4
simulated seconds, the members' rounds side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train

SIM = ["runtime.backend=simulated", "runtime.prewarm=false", "runtime.max_workers=null",
       "train.total_env_steps=1000000", "train.target_return=1000", "train.eval_episodes=0",
       "simulation.functions.actor.median_s=1.0", "simulation.functions.actor.cold_start_s=0.0",
       "simulation.functions.learner.median_s=3.0", "simulation.functions.learner.cold_start_s=0.0"]


def _pbt(make_shipped_config, *, root: Path, synchronous: bool = False):
    config = make_shipped_config("pbt-cartpole", overrides=[*SIM, "train.max_rounds=10", f"output.root_dir={root}",
                                                            f"pbt.synchronous={str(synchronous).lower()}"])
    return train(config=config)


def _trace(run_dir: Path) -> dict:
    members = sorted(p.name for p in (run_dir / "policies").iterdir())
    return {"lineage": (run_dir / "lineage.jsonl").read_text(),
            "hyperparameters": (run_dir / "hyperparameters.jsonl").read_text(),
            "rows": {m: read_metrics(path=run_dir / "policies" / m / "metrics.jsonl") for m in members}}


@pytest.mark.parametrize("synchronous", [False, True])
def test_pbt_runs_in_simulated_time_and_repeats_bitwise(make_shipped_config, tmp_path: Path, synchronous) -> None:
    """Synchronous too: the population with its wait runs to the end and repeats bitwise on the virtual clock."""
    first = _pbt(make_shipped_config, root=tmp_path / "a", synchronous=synchronous)
    lineage = [json.loads(line) for line in (first.run_dir / "lineage.jsonl").read_text().splitlines()]
    assert [e["event"] for e in lineage].count("exploit") >= 1, lineage   # the controller acted
    trace = _trace(first.run_dir)
    assert len(trace["rows"]) == 4
    for rows in trace["rows"].values():
        assert [row["round_s"] for row in rows] == [4.0] * 10           # side by side on one pool
        assert [row["wall_s"] for row in rows] == [4.0 * (r + 1) for r in range(10)]
    assert first.summary.wall_s == 40.0                                  # simulated, not this machine's seconds
    again = _pbt(make_shipped_config, root=tmp_path / "b", synchronous=synchronous)
    assert _trace(again.run_dir) == trace


def test_a_policies_population_runs_in_simulated_time(make_shipped_config, tmp_path: Path) -> None:
    config = make_shipped_config("ppo-cartpole", overrides=[
        *SIM, "train.max_rounds=3", "policies=[{name: a, algo: {lr: 1.0e-3}}, {name: b, algo: {lr: 3.0e-4}}]"])
    result = train(config=config)
    rows = {m: read_metrics(path=result.run_dir / "policies" / m / "metrics.jsonl") for m in ("a", "b")}
    assert {m: [row["wall_s"] for row in own] for m, own in rows.items()} == {"a": [4.0, 8.0, 12.0],
                                                                                "b": [4.0, 8.0, 12.0]}
    assert result.summary.wall_s == 12.0
