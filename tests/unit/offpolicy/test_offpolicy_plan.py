"""ReplayPlan per algorithm, the replay it builds, and the Pacer's debt and back-pressure arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config import load_config
from nimbus.data.fragment_replay import FIFO
from nimbus.data.replay import NStep, Prioritized, Uniform
from nimbus.errors import ConfigError
from nimbus.offpolicy.plan import Pacer, make_replay, plan_for

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_dqn_plan_follows_sb3_names_and_builds_nstep_over_per() -> None:
    config = load_config(path=CONFIGS / "dqn-cartpole.yaml", overrides=["algo.prioritized=true", "algo.n_step=3"])
    plan = plan_for(config=config)
    assert plan.kind == "replay" and plan.updates_per_row == 128 / 256 and plan.train_rows == 256
    assert plan.learning_starts == 1000 and plan.capacity_rows == 100_000 and not plan.random_warmup
    replay = make_replay(plan=plan, seed=0)
    assert isinstance(replay, NStep) and isinstance(replay.inner, Prioritized)
    assert replay.segment_rows == config.actors.fragment_steps and replay.n == 3
    assert type(make_replay(plan=plan_for(config=load_config(path=CONFIGS / "dqn-cartpole.yaml")), seed=0)) is Uniform


def test_sac_and_impala_plans() -> None:
    sac = plan_for(config=load_config(path=CONFIGS / "sac-pendulum.yaml"))
    assert sac.random_warmup and sac.updates_per_row == 1.0 and sac.learning_starts == 256  # ≥ batch_size
    impala_config = load_config(path=CONFIGS / "impala-cartpole.yaml")
    impala = plan_for(config=impala_config)
    rows = impala_config.env.num_envs_per_actor * impala_config.actors.fragment_steps
    assert impala.kind == "fifo" and impala.fragment_rows == rows and impala.row_group == 20
    assert isinstance(make_replay(plan=impala, seed=0), FIFO)
    with pytest.raises(ConfigError):
        plan_for(config=load_config(path=CONFIGS / "ppo-cartpole.yaml"))


def test_pacer_owes_sb3_gradient_steps_and_holds_actors_back() -> None:
    plan = plan_for(config=load_config(path=CONFIGS / "dqn-cartpole.yaml"))   # 0.5 steps per row after 1000
    pacer = Pacer(plan=plan, max_steps_ahead=512, max_steps_per_call=128)
    pacer.rows_ingested = 1000
    assert pacer.owed_steps() == 0 and pacer.consumed_rows() == 1000
    pacer.rows_ingested = 1256
    assert pacer.owed_steps() == 128
    pacer.rows_ingested = 2000
    assert pacer.owed_steps() == 128                       # capped per call
    pacer.steps_started = 400
    assert pacer.owed_steps() == 100 and pacer.consumed_rows() == 1800
    assert pacer.may_collect(rows=312) and not pacer.may_collect(rows=313)   # 2000 + r ≤ 1800 + 512
    pacer.rows_in_flight = 64
    assert not pacer.may_collect(rows=312)
    assert Pacer(plan=plan, max_steps_ahead=None, max_steps_per_call=1).may_collect(rows=10**9)


def test_pacer_fifo_counts_rows_taken() -> None:
    plan = plan_for(config=load_config(path=CONFIGS / "impala-cartpole.yaml"))
    pacer = Pacer(plan=plan, max_steps_ahead=2 * plan.fragment_rows, max_steps_per_call=1)
    assert pacer.may_collect(rows=plan.fragment_rows)
    pacer.rows_ingested = 2 * plan.fragment_rows
    assert not pacer.may_collect(rows=plan.fragment_rows)
    pacer.rows_taken = plan.fragment_rows
    assert pacer.may_collect(rows=plan.fragment_rows)


def test_pacer_bounds_gradient_steps_per_draw_with_per() -> None:
    per = plan_for(config=load_config(path=CONFIGS / "dqn-cartpole.yaml", overrides=["algo.prioritized=true"]))
    pacer = Pacer(plan=per, max_steps_ahead=None, max_steps_per_call=128, prioritized_steps_per_call=8)
    pacer.rows_ingested = 2000                              # 500 steps owed
    assert pacer.owed_steps() == 8                          # one draw per 8 steps, not per 128
    uniform = plan_for(config=load_config(path=CONFIGS / "dqn-cartpole.yaml"))
    assert Pacer(plan=uniform, max_steps_ahead=None, max_steps_per_call=128,
                 prioritized_steps_per_call=8).max_steps_per_call == 128


def test_back_pressure_scales_with_the_decided_actor_count() -> None:
    plan = plan_for(config=load_config(path=CONFIGS / "impala-cartpole.yaml"))
    pacer = Pacer(plan=plan, max_steps_ahead=2 * plan.fragment_rows, max_steps_per_call=1, base_actors=1)
    pacer.rows_ingested = 2 * plan.fragment_rows
    assert not pacer.may_collect(rows=plan.fragment_rows, actors=1)
    assert pacer.may_collect(rows=plan.fragment_rows, actors=2)    # a boost to 2 actors doubles the room
    pacer.rows_in_flight = 2 * plan.fragment_rows
    assert not pacer.may_collect(rows=plan.fragment_rows, actors=2)
