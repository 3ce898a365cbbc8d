"""``nimbus plan --simulate`` under a signal: the seed a SIGINT or SIGTERM stopped is not counted, no seed after it
runs, and the plan exits 0 saying what completed. Each seed's start and end is said as it happens (progress)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import nimbus.run.loop

REPO = Path(__file__).resolve().parents[3]


def fake_train(stops: dict[int, str]):
    """``train`` as the plan calls it: seed s ends by ``stops.get(s)`` (a signal) or by its step limit."""
    ran: list[int] = []

    def train(*, config, run_dir):
        ran.append(config.seed)
        summary = SimpleNamespace(stopped_by=stops.get(config.seed, "total_env_steps"), rounds=4, env_steps=1024,
                                  wall_s=10.0 + config.seed, serverless_cost_usd=0.01, serverful_cost_usd=0.02,
                                  final_return=100.0 if config.seed not in stops else 3.0)
        return SimpleNamespace(run_dir=run_dir, summary=summary, rows=[SimpleNamespace(round_s=2.5)] * 4)
    return train, ran


@pytest.mark.parametrize("signal", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_plan_and_its_seed_is_not_counted(run_cli, tmp_path: Path, monkeypatch, signal) -> None:
    train, ran = fake_train({1: signal})
    monkeypatch.setattr(nimbus.run.loop, "train", train)
    code, said = run_cli("plan", "--simulate", "--config", str(REPO / "configs" / "ppo-cartpole.yaml"),
                         "--seeds", "0", "1", "2", "--dir", str(tmp_path))
    assert code == 0, said
    assert ran == [0, 1]                                   # seed 2 never started
    assert f"stopped by {signal} during seed 1 (not counted): 1 of 3 seed(s) completed" in said
    assert "seed 0: 4 rounds" in said and "seed 1: 4 rounds" not in said
    assert "final_return: IQM 100" in said and "over 1 seed(s)" in said
    assert "seed 0 (1 of 3): simulating up to" in said and "seed 0 done: 4 rounds, 10.0 s simulated time" in said


def test_a_signal_in_the_first_seed_ends_the_plan_with_nothing_counted(run_cli, tmp_path: Path, monkeypatch) -> None:
    train, ran = fake_train({0: "SIGINT"})
    monkeypatch.setattr(nimbus.run.loop, "train", train)
    code, said = run_cli("plan", "--simulate", "--config", str(REPO / "configs" / "ppo-cartpole.yaml"),
                         "--seeds", "0", "1", "--dir", str(tmp_path))
    assert code == 0 and ran == [0], said
    assert "0 of 2 seed(s) completed" in said and "IQM" not in said


def test_ctrl_c_while_a_seed_is_built_stops_the_plan_the_same_way(run_cli, tmp_path: Path, monkeypatch) -> None:
    train, ran = fake_train({})

    def interrupted_second(*, config, run_dir):
        if ran:
            raise KeyboardInterrupt
        return train(config=config, run_dir=run_dir)

    monkeypatch.setattr(nimbus.run.loop, "train", interrupted_second)
    code, said = run_cli("plan", "--simulate", "--config", str(REPO / "configs" / "ppo-cartpole.yaml"),
                         "--seeds", "0", "1", "--dir", str(tmp_path))
    assert code == 0 and "stopped by SIGINT during seed 1 (not counted): 1 of 2 seed(s) completed" in said, said
