"""Nitro end to end: the learner probes, the scaler scales, the rows say why. The scaler is driver logic, so these
runs are inline (runtime/inline.py: no forked workers); Nitro on forked workers is the nitro_ppo_cartpole
snapshot case (tests/integration/test_snapshots.py: every round's actor count, bitwise)."""

from __future__ import annotations

import math

from nimbus.config import parse_config
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train

NITRO = ("actors.scaling={kind: nitro, min_actors: 1, max_actors: 4, "
         "hessian: {subset_size: 256, max_iterations: 30}}")
INLINE = "runtime.backend=inline"
SMALL_ROUNDS = ["algo.minibatch_size=64", "train.max_rounds=8", INLINE]   # 1 actor = 4 envs × 32 steps = 128 rows


def test_ppo_cartpole_nitro_varies_actors_within_bounds(make_config) -> None:
    result = train(config=make_config(overrides=[*SMALL_ROUNDS, NITRO]))
    rows = result.rows
    actors = [row.num_actors for row in rows]
    assert len(rows) == 8 and all(1 <= n <= 4 for n in actors)
    assert len(set(actors)) > 1, actors                        # the probe's R moved the actor count
    assert actors[0] == 1                                       # paper variant: I_min before any probe
    for row, following in zip(rows, rows[1:]):
        assert following.num_actors == row.extras["next_num_actors"]   # row r's decision ran round r+1
    for row in rows:
        extras = row.extras
        assert {"hessian_lambda_max", "hessian_lambda_min", "probe_s", "probe_share", "score"} <= set(extras)
        assert extras["probe_s"] > 0 and 0 <= extras["score"] <= 1
        if math.isfinite(extras["hessian_ratio"]):
            assert extras["hessian_ratio"] == -extras["hessian_lambda_max"] / extras["hessian_lambda_min"]
    written = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert [r["extras"]["score"] for r in written] == [r.extras["score"] for r in rows]


def _budget(on_budget: str) -> str:
    return ("actors.scaling={kind: nitro, min_actors: 1, max_actors: 2, budget_usd: 0.000001, "
            f"on_budget: {on_budget}, hessian: {{subset_size: 128, max_iterations: 20}}}}")


def test_ppo_cartpole_nitro_budget_spent_keeps_min_actors(make_config) -> None:
    result = train(config=make_config(overrides=["algo.minibatch_size=64", "train.max_rounds=4", _budget("min"),
                                                 INLINE]))
    assert [row.num_actors for row in result.rows] == [1, 1, 1, 1]
    assert all(row.extras["budget_spent"] == 1.0 and row.extras["budget_left_usd"] == 0.0 for row in result.rows)
    assert result.summary.stopped_by == "max_rounds"


def test_ppo_cartpole_nitro_budget_spent_stops_the_run_by_default(make_config) -> None:
    budget = _budget("stop").replace("on_budget: stop, ", "")      # the default is the paper's: stop
    result = train(config=make_config(overrides=["algo.minibatch_size=64", "train.max_rounds=4", budget, INLINE]))
    assert len(result.rows) == 1 and result.rows[0].extras["budget_stop"] == 1.0
    assert result.summary.stopped_by == "budget_spent"


def test_fixed_scaler_runs_without_probe(make_config) -> None:
    result = train(config=make_config(overrides=["train.max_rounds=2", INLINE]))
    assert all("hessian_ratio" not in row.extras and row.extras["next_num_actors"] == 2 for row in result.rows)


def test_impala_cartpole_nitro_off_policy_boosting(tmp_path) -> None:
    """Off-policy mode: actors keep sampling while the learner updates and probes; each update's decision
    sets how many actors run concurrently until the next one."""
    data = {"name": "impala-nitro", "seed": 0, "env": {"id": "CartPole-v1", "num_envs_per_actor": 2},
            "algo": {"name": "impala", "rollout_length": 16, "hidden_sizes": [32, 32]},
            "actors": {"fragment_steps": 16, "scaling": {"kind": "nitro", "min_actors": 1, "max_actors": 3,
                                                         "hessian": {"subset_size": 64, "max_iterations": 20}}},
            # back-pressure keeps each update's FIFO fragments from being overwritten before it reads them
            "offpolicy": {"max_steps_ahead": 128},
            "train": {"workflow": "offpolicy", "max_rounds": 12, "total_env_steps": 100_000, "eval_episodes": 0},
            "runtime": {"backend": "inline"},
            "output": {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}}
    result = train(config=parse_config(data=data))
    rows = result.rows
    decided = [row.extras["actors_decided"] for row in rows]
    assert len(rows) == 12 and all(1 <= n <= 3 for n in decided)
    assert len(set(decided)) > 1, decided
    for row, following in zip(rows, rows[1:]):
        assert following.extras["actors_decided"] == row.extras["next_num_actors"]
    # rows count the ranks that ran; when the scaler boosts, ranks > 0 do run (back-pressure scales with it)
    ran = [row.num_actors for row in rows]
    assert all(n <= 3 for n in ran)
    boosted = [n for n, d in zip(ran[1:], decided[1:]) if d >= 2]
    assert boosted and max(boosted) >= 2, (ran, decided)
    assert all(row.extras["probe_s"] > 0 and "score" in row.extras for row in rows)


AUTHORS = ("actors.scaling={kind: nitro, min_actors: 1, max_actors: 4, variant: authors_code, "
           "hessian: {max_iterations: 30}}")


def test_ppo_cartpole_authors_code_reads_the_authors_probe(make_config) -> None:
    """variant: authors_code end to end: the learner runs the authors' probe (whole loss, every parameter, whole
    batch, their padded grid) and the scaler scores its R as read (nitro/probe_authors.py, scaler_authors.py)."""
    result = train(config=make_config(overrides=[*SMALL_ROUNDS, AUTHORS]))
    rows = result.rows
    assert len(rows) == 8 and rows[0].num_actors == 1                          # I_max // 4, at least I_min
    for row, following in zip(rows, rows[1:]):
        assert following.num_actors == row.extras["next_num_actors"]
    for row in rows:
        extras = row.extras
        assert extras["hessian_grid_padding"] == 0.01 and extras["probe_rows"] == row.num_actors * 128
        assert extras["hessian_lambda_max"] == extras["hessian_ritz_max"] + 0.01
        assert extras["hessian_ratio"] == -extras["hessian_lambda_max"] / extras["hessian_lambda_min"]
        assert extras["hessian_num_hvps"] == 30 and extras["floor_actors"] >= 1
    assert rows[0].extras["next_num_actors"] == 4                            # one value in the window: S = 1


def test_impala_cartpole_authors_code_probes_every_update(tmp_path) -> None:
    data = {"name": "impala-nitro-authors", "seed": 0, "env": {"id": "CartPole-v1", "num_envs_per_actor": 2},
            "algo": {"name": "impala", "rollout_length": 16, "hidden_sizes": [32, 32]},
            "actors": {"fragment_steps": 16, "scaling": {"kind": "nitro", "min_actors": 1, "max_actors": 3,
                                                         "variant": "authors_code", "hessian": {"max_iterations": 20}}},
            "offpolicy": {"max_steps_ahead": 128},
            "train": {"workflow": "offpolicy", "max_rounds": 6, "total_env_steps": 100_000, "eval_episodes": 0},
            "runtime": {"backend": "inline"},
            "output": {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}}
    rows = train(config=parse_config(data=data)).rows
    assert len(rows) == 6
    probed = [row for row in rows if math.isfinite(row.extras["hessian_ratio"])]
    assert probed and all(row.extras["hessian_grid_padding"] == 0.01 for row in probed)
    assert all(1 <= row.extras["actors_decided"] <= 3 for row in rows)
