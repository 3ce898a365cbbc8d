"""A run's second bill on a real (simulated-backend) PPO run: ``serverless_cost_excl_cold_usd`` is the billed cost
less exactly its cold starts' price (each the simulation model's ``cold_start_s``, priced by hand), and every
metrics row carries the running figure the summary ends with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from support import ledger_rows

LAMBDA_USD_PER_GB_S = 0.0000166667
V100_USD_PER_S = 3.06 / 3600
COLD_START_S = {"actor": 1.5, "learner": 0.75}
SIM = ["runtime.backend=simulated", "train.max_rounds=3", "train.total_env_steps=100000",
       *(f"simulation.functions.{kind}.cold_start_s={s}" for kind, s in COLD_START_S.items())]


def _one_cold_start_usd(*, kind: str, config) -> float:
    """A cold start's price by hand: the learner a share of a V100, the actor Lambda GB-seconds."""
    if kind == "learner":
        return config.learner.function.gpus * V100_USD_PER_S * COLD_START_S[kind]
    return config.actors.function.memory_mb / 1024 * LAMBDA_USD_PER_GB_S * COLD_START_S[kind]


def test_the_two_figures_differ_by_exactly_the_cold_starts_price(make_config, tmp_path: Path) -> None:
    config = make_config(overrides=[*SIM, "runtime.prewarm=false"])
    assert config.learner.function.gpus > 0          # both price paths: a GPU share and Lambda GB-seconds
    result = train(config=config, run_dir=tmp_path / "run")
    ledger = ledger_rows(result.run_dir)
    assert not any(r["provisioned"] for r in ledger) and not any(r["outcome"] == "cancelled" for r in ledger)
    cold = [r for r in ledger if r["cold"]]
    assert {r["kind"] for r in cold} == {"actor", "learner"}
    assert all(r["init_s"] == COLD_START_S[r["kind"]] for r in cold)
    cold_usd = sum(_one_cold_start_usd(kind=r["kind"], config=config) for r in cold)
    summary = result.summary
    assert summary.serverless_cost_usd - summary.serverless_cost_excl_cold_usd == pytest.approx(cold_usd, rel=1e-9)
    assert json.loads((result.run_dir / "summary.json").read_text())["serverless_cost_excl_cold_usd"] == \
        summary.serverless_cost_excl_cold_usd
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert rows[-1]["extras"]["cost_excl_cold_usd"] == summary.serverless_cost_excl_cold_usd


def test_pre_warmed_workers_idle_time_is_left_out_too(make_config, tmp_path: Path) -> None:
    config = make_config(overrides=[*SIM, "runtime.prewarm=true"])
    result = train(config=config, run_dir=tmp_path / "run")
    ledger = ledger_rows(result.run_dir)
    assert any(r["provisioned"] and r["outcome"] == "prewarm" and not r["cold"] for r in ledger)   # stretches billed
    cold_usd = sum(_one_cold_start_usd(kind=r["kind"], config=config) for r in ledger if r["cold"])
    summary = result.summary
    assert summary.serverless_cost_usd - summary.serverless_cost_excl_cold_usd > cold_usd * (1 + 1e-6)
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    running = [row["extras"]["cost_excl_cold_usd"] for row in rows]
    assert running == sorted(running) and all(0 < x < row["cost_usd"] for x, row in zip(running, rows))
    assert running[-1] == summary.serverless_cost_excl_cold_usd


def test_a_resumed_run_continues_the_figure_from_its_checkpoint(make_config, tmp_path: Path) -> None:
    """The checkpoint saves the figure: after a resume the two bills still differ by every cold start of both
    sessions (without it the resumed session would start from the full bill and forget the first one's)."""
    overrides = [*SIM, "runtime.prewarm=false", "train.checkpoint_every_rounds=2"]
    first = train(config=make_config(overrides=[*overrides, "train.max_rounds=2"]), run_dir=tmp_path / "run")
    config = make_config(overrides=[*overrides, "train.max_rounds=4"])
    resumed = train(config=config, resume_from=first.run_dir)
    ledger = ledger_rows(first.run_dir)                     # both sessions' rows, one file
    assert not any(r["outcome"] == "cancelled" for r in ledger)
    cold_usd = sum(_one_cold_start_usd(kind=r["kind"], config=config) for r in ledger if r["cold"])
    assert cold_usd > 2 * sum(_one_cold_start_usd(kind=k, config=config) for k in COLD_START_S)   # both sessions'
    summary = resumed.summary
    assert summary.serverless_cost_usd - summary.serverless_cost_excl_cold_usd == pytest.approx(cold_usd, rel=1e-9)
