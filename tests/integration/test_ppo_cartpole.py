"""Whole onpolicy PPO runs: learning happens, runs are deterministic, checkpoints evaluate. Learning, the run directory,
the observation statistics and the bounded rows are the workflow's and the driver's and run inline
(runtime/inline.py: the functions' own code in the driver, the local backend's numbers bit for bit, as
tests/unit/run/test_inline_workflows.py checks); determinism runs on forked workers. `make run` learning on the
local backend: test_cli.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import load_pricing
from nimbus.data.codec import Message
from nimbus.data.shm import list_segments, run_prefix
from nimbus.report.metrics import read_metrics
from nimbus.roles.evaluate import evaluate_checkpoint, evaluate_policy
from nimbus.run.loop import train

INLINE = "runtime.backend=inline"   # driver logic: functions run in the driver (runtime/inline.py), no forks


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_cartpole_reaches_195_within_60k_steps(make_config, seed: int) -> None:
    config = make_config(overrides=[f"seed={seed}", "train.total_env_steps=60000", "train.target_return=195",
                                    "train.return_window=20", INLINE])
    result = train(config=config)
    assert result.summary.final_return is not None and result.summary.final_return >= 195, result.summary
    assert result.summary.env_steps <= 60000
    assert list_segments(prefix=run_prefix()) == []


def test_same_seed_gives_identical_rounds(make_config) -> None:
    """P16: same seed and config → identical per-round returns and losses on CPU in the onpolicy workflow."""
    runs = [train(config=make_config(overrides=["train.max_rounds=3"])) for _ in range(2)]
    a, b = ([(r.return_mean, r.losses.get("policy_loss")) for r in run.rows] for run in runs)
    assert len(a) == 3 and a == b


def test_run_directory_contents_and_checkpoint_evaluation(make_config) -> None:
    config = make_config(overrides=["train.total_env_steps=40000", "train.target_return=150",
                                    "train.return_window=20", "output.report=true", "output.loggers=[tensorboard]",
                                    "train.eval_episodes=5", INLINE])
    result = train(config=config)
    run_dir = result.run_dir
    for name in ("config.yaml", "metrics.jsonl", "ledger.jsonl", "report.png", "summary.json"):
        assert (run_dir / name).exists(), name
    assert list(run_dir.glob("events.out.tfevents.*"))
    rows = read_metrics(path=run_dir / "metrics.jsonl")
    assert len(rows) == result.summary.rounds and rows[-1]["env_steps"] == result.summary.env_steps
    ledger = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    assert {row["function"] for row in ledger} >= {"actor", "learner"}
    pricing = load_pricing()  # the bill is the ledger priced row by row; serverful reserves the peak all along
    assert result.summary.serverless_cost_usd == pytest.approx(
        sum(pricing.cost_usd(record=record) for record in Ledger.load(path=run_dir / "ledger.jsonl")))
    assert result.summary.serverful_cost_usd == pytest.approx(pricing.serverful_cost_usd(
        wall_s=result.summary.wall_s, peak_actor_cpus=2 * config.actors.function.cpus,
        peak_learner_gpus=config.learner.function.gpus))
    evaluated = evaluate_checkpoint(path=run_dir, episodes=20)
    assert evaluated.policy_version == result.summary.policy_version
    assert evaluated.mean_return >= 0.7 * result.summary.final_return
    again = evaluate_checkpoint(path=run_dir, episodes=5, seed=config.seed + 10_000)  # the run's own evaluation
    assert again.mean_return == result.summary.eval_return  # seeded: the checkpoint holds exactly the final policy


def test_observation_normalisation_travels_with_the_weights(make_config) -> None:
    """algo.normalize_obs: the published statistics count every accepted row once and evaluate consistently."""
    from nimbus.data.checkpoint import load_checkpoint

    config = make_config(overrides=["algo.normalize_obs=true", "train.max_rounds=5", "train.eval_episodes=3", INLINE])
    result = train(config=config)
    state = load_checkpoint(path=result.run_dir)
    count = float(state.weights.arrays["extra.obs_rms.count"])
    assert count == result.summary.env_steps == 5 * 2 * 4 * 32
    mean = state.weights.arrays["extra.obs_rms.mean"]
    assert mean.shape == (4,) and np.all(np.isfinite(mean))
    seed = config.seed + 10_000  # the run's own evaluation: the checkpoint's policy sees the same statistics
    assert evaluate_checkpoint(path=result.run_dir, episodes=3, seed=seed).mean_return == result.summary.eval_return
    stripped = Message(header=state.weights.header, arrays={k: v for k, v in state.weights.arrays.items()
                                                             if not k.startswith("extra.obs_rms.")})
    unnormalised = evaluate_policy(config=config.model_copy(update={"algo": config.algo.model_copy(
        update={"normalize_obs": False})}), weights=stripped, episodes=3, seed=seed)
    assert unnormalised.returns != evaluate_checkpoint(path=result.run_dir, episodes=3, seed=seed).returns


def test_a_long_run_keeps_only_the_newest_rows_in_memory(make_config, monkeypatch) -> None:
    """P13: TrainResult.rows and the driver's ledger are bounded; metrics.jsonl, ledger.jsonl and the
    totals keep everything."""
    from nimbus.run import build, loop as trainer

    monkeypatch.setattr(trainer, "ROWS_IN_MEMORY", 3)
    monkeypatch.setattr(build, "LEDGER_RECORDS_IN_MEMORY", 4)
    result = train(config=make_config(overrides=["train.max_rounds=7", INLINE]))
    assert [row.round for row in result.rows] == [4, 5, 6] and result.summary.rounds == 7
    assert len(read_metrics(path=result.run_dir / "metrics.jsonl")) == 7
    ledger = [json.loads(line) for line in (result.run_dir / "ledger.jsonl").read_text().splitlines()]
    assert result.summary.attempts == sum(row["outcome"] != "prewarm" for row in ledger) == 7 * 3
    assert result.summary.serverless_cost_usd == pytest.approx(result.rows[-1].cost_usd)
