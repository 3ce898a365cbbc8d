"""The what-if planner: profiles fitted from ledgers, and a simulation that reproduces known round times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nimbus.cli import main
from nimbus.cost.ledger import LedgerRecord
from nimbus.cost.planner import profile_runs, simulate
from nimbus.cost.pricing import load_pricing

ROWS_PER_ACTOR = 4 * 32


def _learner_s(rows: int) -> float:
    return 0.1 + 0.001 * rows


def _overhead_s(actors: int) -> float:
    return 0.05 + 0.01 * actors


def _record(*, kind: str, start_at: float, duration_s: float) -> str:
    return LedgerRecord(invocation_id=f"{kind}{start_at}", attempt=1, function=kind, kind=kind, worker_id="w",
                        cold=False, init_s=0.0, queued_at=start_at, start_at=start_at, end_at=start_at + duration_s,
                        duration_s=duration_s, billed_s=duration_s, cpus=1.0, gpus=0.0, memory_mb=1024,
                        outcome="ok").to_json()


def make_run(root: Path, *, actors: int, rounds: int = 3) -> Path:
    """A run whose actors take 1 s, learner and overhead follow the lines above."""
    run_dir = root / f"run{actors}"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"env": {"num_envs_per_actor": 4},
                                                         "actors": {"fragment_steps": 32}}))
    ledger, metrics, t = [], [], 0.0
    for r in range(rounds):
        ledger += [_record(kind="actor", start_at=t + 0.001 * i, duration_s=1.0) for i in range(actors)]
        learner = _learner_s(actors * ROWS_PER_ACTOR)
        ledger.append(_record(kind="learner", start_at=t + 1.0, duration_s=learner))
        round_s = 1.0 + learner + _overhead_s(actors)
        metrics.append(json.dumps({"round": r, "num_actors": actors, "round_s": round_s}))
        t += round_s
    (run_dir / "ledger.jsonl").write_text("\n".join(ledger) + "\n")
    (run_dir / "metrics.jsonl").write_text("\n".join(metrics) + "\n")
    return run_dir


def test_two_profiles_predict_a_larger_run_exactly_when_the_lines_hold(tmp_path: Path) -> None:
    profile = profile_runs(run_dirs=[make_run(tmp_path, actors=1), make_run(tmp_path, actors=2)])
    assert profile.learner.slope == pytest.approx(0.001) and profile.learner.intercept == pytest.approx(0.1)
    assert profile.overhead.slope == pytest.approx(0.01) and profile.overhead.intercept == pytest.approx(0.05)
    pricing = load_pricing()
    unbounded = simulate(profile=profile, actors=4, learners=1, rounds=5, pricing=pricing)
    assert unbounded.round_s_mean == pytest.approx(1.0 + _learner_s(4 * ROWS_PER_ACTOR) + _overhead_s(4))
    two_slots = simulate(profile=profile, actors=4, learners=1, rounds=5, pricing=pricing, capacity_cpus=2)
    assert two_slots.round_s_mean == pytest.approx(2.0 + _learner_s(4 * ROWS_PER_ACTOR) + _overhead_s(4))
    split = simulate(profile=profile, actors=4, learners=4, rounds=5, pricing=pricing)
    assert split.round_s_mean == pytest.approx(1.0 + 0.1 + 0.001 * ROWS_PER_ACTOR + _overhead_s(4))
    actor = LedgerRecord.from_json(_record(kind="actor", start_at=0, duration_s=1.0))
    learner = LedgerRecord.from_json(_record(kind="learner", start_at=0, duration_s=_learner_s(4 * ROWS_PER_ACTOR)))
    expected = 5 * (4 * pricing.cost_usd(record=actor) + pricing.cost_usd(record=learner))
    assert unbounded.serverless_usd == pytest.approx(expected)
    assert unbounded.serverful_usd == pytest.approx(pricing.serverful_cost_usd(
        wall_s=unbounded.wall_s, peak_actor_cpus=4.0, peak_learner_gpus=0.0))


def test_plan_command_prints_the_prediction_and_refuses_a_missing_run(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path, actors=2)
    assert main(["plan", str(run), "--actors", "8", "--rounds", "3"]) == 0
    assert "8 actors x 1 learners, 3 rounds" in capsys.readouterr().out
    assert main(["plan", str(tmp_path / "missing"), "--actors", "8"]) == 2
