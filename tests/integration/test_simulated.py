"""``runtime.backend: simulated`` on real workflows: PPO on CartPole and the stellaris workflow learn in seconds
of real time, two runs give the same metrics bitwise, injected deaths are retried without counting data twice,
the rows' time keys are simulated seconds, and a malformed ``simulation:`` section exits 2 naming its key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nimbus.cli import main
from nimbus.config.simulation import load_profile
from nimbus.errors import ConfigError
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from support import ledger_rows

SIM = ["runtime.backend=simulated"]


def test_two_simulated_ppo_runs_give_the_same_rows_bitwise_in_simulated_seconds(make_config, tmp_path: Path) -> None:
    lines = []
    for run in ("a", "b"):
        config = make_config(overrides=[*SIM, "train.max_rounds=6", "train.total_env_steps=100000",
                                        "simulation.functions.actor.distribution=lognormal",
                                        "simulation.functions.actor.sigma=0.4"])
        result = train(config=config, run_dir=tmp_path / run)
        lines.append((result.run_dir / "metrics.jsonl").read_text())
        ledger = [(r["function"], r["start_at"], r["end_at"]) for r in ledger_rows(result.run_dir)]
        assert result.summary.wall_s == read_metrics(path=result.run_dir / "metrics.jsonl")[-1]["wall_s"]
    assert lines[0] == lines[1] and len(lines[0].splitlines()) == 6
    rows = read_metrics(path=tmp_path / "a" / "metrics.jsonl")
    # the learner's 1 s (the default model) after the slowest of two lognormal actors: simulated, not measured
    assert all(row["round_s"] == pytest.approx(row["sampling_s"] + 1.0) for row in rows)
    assert all(row["learning_s"] == 1.0 for row in rows)
    assert max(end for _, _, end in ledger) == pytest.approx(rows[-1]["wall_s"])   # the clock starts with the run


@pytest.mark.slow
def test_simulated_ppo_learns_cartpole(make_config) -> None:
    # stops where the assertion's bar is first met (round 43 of the budget's 80, measured) instead of at 475,
    # which the budget never reaches
    config = make_config(overrides=[*SIM, "train.total_env_steps=20480", "train.target_return=100"])
    result = train(config=config)
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    recent = [row["extras"]["recent_return_mean"] for row in rows]
    assert recent[0] < 40 and max(recent) >= 100, recent[::10]


@pytest.mark.slow
def test_simulated_stellaris_three_learners_learn_cartpole_with_staleness(make_shipped_config) -> None:
    config = make_shipped_config("stellaris-cartpole", overrides=[
        *SIM, "train.total_env_steps=40000", "train.target_return=195", "train.return_window=20",
        # Stellaris's learners are kind gradient_learner: a lognormal spread makes their gradients arrive out of order
        "simulation.functions.gradient_learner.distribution=lognormal",
        "simulation.functions.gradient_learner.sigma=0.5"])
    result = train(config=config)
    assert result.summary.final_return >= 195, result.summary
    extras = [row["extras"] for row in read_metrics(path=result.run_dir / "metrics.jsonl")]
    assert max(e["staleness/max"] for e in extras) > 0
    assert [e["staleness/admitted"] + e["staleness/rejected"] for e in extras] == [16] * len(extras)
    learners = [r for r in ledger_rows(result.run_dir) if r["outcome"] == "ok" and r.get("kind") == "gradient_learner"]
    spread = np.array([r["end_at"] - r["start_at"] for r in learners])
    assert len(learners) > 16 and spread.std() / spread.mean() > 0.2      # the lognormal applies to these learners


def test_injected_deaths_are_retried_and_no_rows_count_twice(make_config) -> None:
    config = make_config(overrides=[*SIM, "train.max_rounds=5", "train.total_env_steps=100000",
                                    "simulation.functions.actor.failure_fraction=0.3",
                                    "simulation.functions.learner.failure_fraction=0.3"])
    result = train(config=config)
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    ledger = [r for r in ledger_rows(result.run_dir) if r["outcome"] != "prewarm"]
    died = [r for r in ledger if r["outcome"] == "worker_died"]
    assert died and {r["function"] for r in died} <= {"actor", "learner"}
    assert [row["env_steps"] for row in rows] == [256 * (i + 1) for i in range(5)]   # each fragment once
    assert [row["policy_version"] for row in rows] == [1, 2, 3, 4, 5]
    assert result.summary.retries == len(died)


@pytest.mark.parametrize(("override", "key"), [
    ("simulation.functions.actor.sigma=0.3", "simulation.functions.actor"),          # sigma without lognormal
    ("simulation.functions.actor.failure_fraction=1.0", "simulation.functions.actor.failure_fraction"),
    ("simulation.functions.gpu.median_s=1", "simulation.functions.gpu"),
    ("simulation.default.median_s=0", "simulation.default.median_s"),
    ("simulation.profile=/nonexistent/profile.yaml", "simulation.profile"),
    ("simulation.hardware=/nonexistent/hw.yaml", "simulation.hardware"),
])
def test_a_malformed_simulation_section_exits_2_naming_the_key(make_config, override: str, key: str,
                                                               tmp_path: Path, capsys) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make_config(overrides=[*SIM, override])
    config_path = tmp_path / "c.yaml"
    config_path.write_text("algo: {name: ppo}\nruntime: {backend: simulated}\n")
    assert main(["train", str(config_path), "--set", override]) == 2
    assert key in capsys.readouterr().err


def test_what_the_simulation_cannot_drive_is_refused_before_anything_starts(make_config) -> None:
    with pytest.raises(ConfigError, match="devices.kind"):
        make_config(overrides=[*SIM, "devices.pool=on_demand", "devices.kind=cuda"])
    make_config(overrides=[*SIM, "policies=[{name: a}, {name: b}]"])   # populations: test_simulated_population.py
    make_config(overrides=[*SIM, "devices.pool=on_demand", "devices.cpu_slots=2"])   # simulated devices now
    make_config(overrides=[*SIM, "prewarm.mode=monitor"])   # the monitor's trigger runs on the virtual clock


def test_a_profile_fitted_from_a_real_runs_ledger_drives_a_simulated_run(make_config, tmp_path: Path) -> None:
    """A tiny real run (local workers) → ``nimbus simulate fit`` → the simulated run's rounds take about as long."""
    rounds = ["train.max_rounds=5", "train.total_env_steps=100000"]
    real = train(config=make_config(overrides=rounds), run_dir=tmp_path / "real")
    assert main(["simulate", "fit", str(real.run_dir)]) == 0
    profile_path = real.run_dir / "simulation-profile.yaml"
    profile = load_profile(path=profile_path)
    for kind in ("actor", "learner"):
        durations = [r["duration_s"] for r in ledger_rows(real.run_dir) if r["kind"] == kind and r["outcome"] == "ok"]
        assert min(durations) <= profile.functions[kind].median_s <= max(durations)
    assert profile.functions["actor"].cold_start_s > 0   # the pre-warmed workers' starts
    simulated = train(config=make_config(overrides=[*SIM, *rounds, f"simulation.profile={profile_path}"]),
                      run_dir=tmp_path / "simulated")
    real_s = sorted(row["round_s"] for row in read_metrics(path=real.run_dir / "metrics.jsonl"))[2]
    simulated_s = sorted(row["round_s"] for row in read_metrics(path=simulated.run_dir / "metrics.jsonl"))[2]
    # medians; the driver's own time is not modelled
    assert real_s / 3 < simulated_s < real_s * 3, (real_s, simulated_s)
