"""``nimbus plan --simulate`` (run/plan.py): per-seed simulated runs aggregated as IQM with 95 % bootstrap
intervals; refusals exit 2 before any run starts. The timing-only model stays the default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.run.plan import SeedPlan, aggregate_seeds

REPO = Path(__file__).resolve().parents[3]


def seed_plan(seed: int, *, ret: float | None, wall_s: float) -> SeedPlan:
    return SeedPlan(seed=seed, run_dir=f"r{seed}", rounds=4, env_steps=1024, wall_s=wall_s, round_s_median=wall_s / 4,
                    serverless_usd=0.01 * wall_s, serverful_usd=0.02 * wall_s, final_return=ret)


def test_aggregate_seeds_is_the_iqm_with_a_bootstrap_interval_and_skips_seeds_without_a_return() -> None:
    seeds = [seed_plan(i, ret=r, wall_s=w) for i, (r, w) in enumerate(
        [(10.0, 8.0), (20.0, 9.0), (30.0, 10.0), (1000.0, 11.0), (None, 100.0)])]
    plan = aggregate_seeds(seeds=seeds)
    # IQM of 4 returns (25 % cut at each end: the middle two) and of 5 wall times (the middle three)
    assert plan.final_return.point == pytest.approx(25.0)
    assert plan.wall_s.point == pytest.approx(10.0)
    assert plan.serverless_usd.point == pytest.approx(0.10) and plan.round_s.point == pytest.approx(2.5)
    for interval in (plan.final_return, plan.wall_s, plan.serverful_usd):
        assert interval.low <= interval.point <= interval.high and interval.low < interval.high
    assert len(plan.seeds) == 5
    alone = aggregate_seeds(seeds=[seed_plan(0, ret=None, wall_s=3.0)])
    assert alone.final_return is None and alone.wall_s.low is None and alone.wall_s.point == 3.0
    with pytest.raises(ValueError):
        aggregate_seeds(seeds=[])


def test_plan_simulate_runs_each_seed_and_prints_rows_and_intervals(run_cli, tmp_path: Path) -> None:
    code, said = run_cli("plan", "--simulate", "--config", str(REPO / "configs" / "ppo-cartpole.yaml"),
                         "--set", "actors.scaling.num_actors=2", "--set", "train.total_env_steps=512",
                         "--set", "train.eval_episodes=0", "--seeds", "0", "1", "--dir", str(tmp_path))
    assert code == 0, said
    assert "seed 0: 2 rounds, 512 env steps" in said and "seed 1: 2 rounds, 512 env steps" in said
    for name in ("wall_s", "round_s", "serverless_usd", "serverful_usd", "final_return"):
        assert f"{name}: IQM" in said
    assert (tmp_path / "seed-1" / "ledger.jsonl").is_file()   # the runs were simulated runs, kept with --dir
    first = (tmp_path / "seed-0" / "config.yaml").read_text()
    assert "backend: simulated" in first


@pytest.mark.parametrize(("args", "key"), [
    (("--set", "devices.pool=on_demand", "--set", "devices.kind=cuda"), "devices.kind"),   # simulated devices: CPU
    (("--set", "actors.scaling.num_actors=0"), "actors.scaling.num_actors"),
])
def test_plan_simulate_refuses_what_the_simulated_backend_refuses(run_cli, tmp_path: Path, args, key) -> None:
    code, said = run_cli("plan", "--simulate", "--config", str(REPO / "configs" / "ppo-cartpole.yaml"), *args,
                         "--dir", str(tmp_path))
    assert code == 2 and key in said, said
    assert not any(tmp_path.iterdir())   # refused before any run started


def test_plan_without_simulate_needs_run_dirs_and_actors(run_cli) -> None:
    code, said = run_cli("plan", "--actors", "4")
    assert code == 2 and "RUN_DIR" in said
    code, said = run_cli("plan", "--simulate")
    assert code == 2 and "--config" in said


def test_plan_simulate_runs_a_marless_config(run_cli, tmp_path: Path) -> None:
    """The marless workflow on the simulated backend (issue 30: MARLess at the paper's actor counts)."""
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    code, said = run_cli("plan", "--simulate", "--config", str(REPO / "configs" / "marless-ippo-spread.yaml"),
                         "--set", "actors.scaling.num_actors=2", "--set", "env.num_envs_per_actor=2",
                         "--set", "algo.num_epochs=1", "--set", "train.total_env_steps=200",
                         "--set", "train.eval_episodes=0", "--seeds", "0", "1", "--dir", str(tmp_path))
    assert code == 0, said
    assert "seed 0: 2 rounds, 200 env steps" in said and "seed 1: 2 rounds, 200 env steps" in said
    assert "final_return: IQM" in said
    kinds = {json.loads(line)["kind"] for line in (tmp_path / "seed-0" / "ledger.jsonl").read_text().splitlines()}
    assert {"actor", "critic", "policy"} <= kinds
