"""The ``offpolicy`` workflow end to end: DQN, SAC, IMPALA learn; the bindings, policy lag, back-pressure,
lockstep and the Atari config work. IMPALA's learning, the overlap of actors and learner, lockstep and
back-pressure run on forked workers. DQN's and SAC's learning and IMPACT's heard-from weights run inline
(runtime/inline.py: invocations in submission order, so a run repeats; on workers under CI load SAC's run ran
past pytest's 300 s timeout, and how many updates a run got depended on the load)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from nimbus.config import load_config
from nimbus.data.shm import list_segments, run_prefix
from nimbus.errors import ConfigError
from nimbus.run.loop import train
from support import ledger_rows

REPO = Path(__file__).resolve().parents[2]
INLINE = "runtime.backend=inline"   # logic-only tests: functions run in the driver (runtime/inline.py), no forks


# ----------------------------------------------------------------------------------------- learning
@pytest.mark.slow
def test_dqn_cartpole_greedy_policy_reaches_475_within_50k_steps(make_shipped_config) -> None:
    # DQN's greedy policy on CartPole swings between 500 and ~100 from one evaluation to the next with
    # rl-zoo's hyperparameters, in SB3 too (docs/benchmarks.md: SB3 ends below 475 on 3 seeds of 10), so the
    # test stops on a periodic greedy evaluation reaching 475, as SB3's EvalCallback would; in 6 harness
    # seeds every run reached 500 by 35k steps
    config = make_shipped_config("dqn-cartpole", overrides=[
        "train.eval_every_env_steps=2500", "train.eval_episodes=10", "train.eval_explore=false",
        "train.target_eval_return=475", INLINE])
    result = train(config=config)
    assert result.summary.stopped_by == "target_eval_return", result.summary
    assert result.summary.env_steps <= 50_000
    evals = [row.extras["eval/return_mean"] for row in result.rows if "eval/return_mean" in row.extras]
    assert evals[-1] >= 475 and len(evals) == result.summary.env_steps // 2500, evals
    assert list_segments(prefix=run_prefix()) == []


@pytest.mark.slow
def test_sac_pendulum_greedy_policy_reaches_minus_200_within_15k_steps(make_shipped_config) -> None:
    # learning, not just improving: −200 is where rl-zoo's SAC ends on Pendulum (the first evaluation, at ~500
    # env steps, plays −1 480 to −1 590); the shipped hyperparameters and replay ratio with a [64, 64] network
    # (the shipped [256, 256] is the benchmark's, benchmarks/sac_pendulum_vs_sb3.py: on one core it made this
    # test 50 s). The run stops on a periodic greedy evaluation (5 episodes every 500 env steps, SB3's
    # EvalCallback) reaching −200, not on the mean of the last 10 training episodes, which trails the policy by up
    # to 10 episodes of 200 steps. Measured inline, alone, seeds 0-4: the greedy policy first reached −200 at
    # 4 000, 3 504, 3 008, 4 000 and 4 000 env steps (−129 to −184; 24-30 s each); with [256, 256], seed 0 at
    # 4 512 (50 s). The greedy return swings after its first crossing, so the final evaluation is not asserted.
    config = make_shipped_config("sac-pendulum", overrides=[
        "train.total_env_steps=15000", "train.eval_every_env_steps=500", "train.eval_episodes=5",
        "train.eval_explore=false", "train.target_eval_return=-200", "algo.hidden_sizes=[64,64]", INLINE])
    result = train(config=config)
    assert result.summary.stopped_by == "target_eval_return", result.summary
    assert result.summary.env_steps <= 15_000
    evals = [row.extras["eval/return_mean"] for row in result.rows if "eval/return_mean" in row.extras]
    assert evals[-1] >= -200 and evals[0] < -600, evals   # from a fresh policy's play to the bar


@pytest.mark.slow
def test_impala_cartpole_reaches_150_within_100k_steps(make_shipped_config) -> None:
    config = make_shipped_config("impala-cartpole", overrides=["train.target_return=150", "train.return_window=20"])
    result = train(config=config)
    assert result.summary.stopped_by == "target_return", result.summary
    assert result.summary.final_return >= 150 and result.summary.env_steps <= 100_000


# ------------------------------------------------------------------------------------------ workflow
def _overlaps(actors: list[dict], learners: list[dict]) -> list[dict]:
    return [a for a in actors for b in learners if a["start_at"] < b["end_at"] and b["start_at"] < a["end_at"]]


def test_async_rows_carry_policy_lag_and_actors_run_while_the_learner_learns(make_shipped_config) -> None:
    config = make_shipped_config("dqn-cartpole", overrides=["train.max_rounds=4", "algo.learning_starts=256",
                                                            "algo.hidden_sizes=[32]"])
    result = train(config=config)
    rows = result.rows
    assert len(rows) == 4 and [r.policy_version for r in rows] == [1, 2, 3, 4]
    # the learner making version v reads rows sampled by versions 0..v-1: lag = v - 1 - row version
    assert all(0 <= r.extras["policy_lag_max"] <= r.policy_version - 1 for r in rows)
    assert rows[-1].extras["policy_lag_max"] >= 1         # replay reuses rows of older versions
    # policy_lag.json's histogram against the rounds' means and maxima: tests/unit/run/test_inline_workflows.py
    ledger = ledger_rows(result.run_dir)
    learners = [r for r in ledger if r["function"] == "learner" and r["outcome"] == "ok"]
    actors = [r for r in ledger if r["function"] == "actor" and r["outcome"] == "ok"]
    assert _overlaps(actors, learners), "offpolicy: actors should run while the learner updates"
    assert list_segments(prefix=run_prefix()) == []


def test_lockstep_alternates_actors_and_learner(make_shipped_config) -> None:
    config = make_shipped_config("dqn-cartpole", overrides=["train.max_rounds=3", "algo.learning_starts=256",
                                                            "algo.hidden_sizes=[32]", "offpolicy.lockstep=true"])
    result = train(config=config)
    ledger = ledger_rows(result.run_dir)
    learners = [r for r in ledger if r["function"] == "learner" and r["outcome"] == "ok"]
    actors = [r for r in ledger if r["function"] == "actor" and r["outcome"] == "ok"]
    assert len(learners) == 3
    assert not _overlaps(actors, learners)


def test_dqn_with_prioritized_nstep_replay_runs(make_shipped_config) -> None:
    config = make_shipped_config("dqn-cartpole", overrides=["train.max_rounds=3", "algo.learning_starts=256",
                                                            "algo.hidden_sizes=[32]", "algo.prioritized=true",
                                                            "algo.n_step=3"])
    result = train(config=config)
    losses = [r.losses for r in result.rows]
    assert len(losses) == 3
    # Huber(x) <= |x| and PER's importance weights are normalised to <= 1: the loss stays below the mean |TD|
    # (an MSE loss or unnormalised weights would not), and it is not zero
    assert all(0 < loss["td_loss"] < loss["td_abs"] for loss in losses)
    # the step counter travels with the weights from version to version, and the target net follows it
    assert losses[-1]["total_gradient_steps"] == sum(loss["num_gradient_steps"] for loss in losses)
    assert sum(loss["num_target_updates"] for loss in losses) == losses[-1]["total_gradient_steps"] // 128


def test_impact_sends_new_weights_to_the_actors_it_heard_from(make_shipped_config) -> None:
    config = make_shipped_config("impala-cartpole", overrides=["train.max_rounds=12", "actors.scaling.num_actors=3",
                                                               "algo.variant=impact", INLINE])
    result = train(config=config)
    assert len(result.rows) == 12
    assert all(r.extras["actors_heard_from"] == 1 for r in result.rows)  # one fragment: one actor gets v+1
    assert all(r.extras["policy_lag_mean"] == r.extras["policy_lag_max"] for r in result.rows)
    assert max(r.extras["policy_lag_max"] for r in result.rows) >= 1
    assert all("clip_fraction" in r.losses for r in result.rows)
    # IMPACT's circular buffer and lagging target: the loss sees π_target ≠ π (issue 15)
    assert max(r.losses["target_log_ratio_max"] for r in result.rows) > 0.0


def test_back_pressure_holds_actors_within_max_steps_ahead(make_shipped_config) -> None:
    config = make_shipped_config("sac-pendulum", overrides=["train.max_rounds=6", "algo.hidden_sizes=[32]",
                                                            "offpolicy.max_steps_ahead=64",
                                                            "offpolicy.max_gradient_steps_per_call=32"])
    result = train(config=config)
    for row in result.rows:  # collected ≤ learning_starts + gradient steps started + ahead (+ one call's worth)
        assert row.env_steps <= 256 + row.policy_version * 32 + 64 + 2 * 32


# --------------------------------------------------------------------------------------- configs
def test_workflow_and_algorithm_must_match() -> None:
    with pytest.raises(ConfigError, match="needs train.workflow: offpolicy"):
        load_config(path=REPO / "configs" / "dqn-cartpole.yaml", overrides=["train.workflow=onpolicy"])
    with pytest.raises(ConfigError, match="needs onpolicy"):
        load_config(path=REPO / "configs" / "ppo-cartpole.yaml", overrides=["train.workflow=offpolicy"])
    with pytest.raises(ConfigError, match="rollout_length"):
        load_config(path=REPO / "configs" / "impala-cartpole.yaml", overrides=["actors.fragment_steps=7"])
    with pytest.raises(ConfigError, match="algo.target_update_interval"):   # IMPACT that would be IMPALA
        load_config(path=REPO / "configs" / "impala-cartpole.yaml",
                    overrides=["algo.variant=impact", "algo.target_update_interval=1"])
    with pytest.raises(ConfigError, match="offpolicy.nonsense"):
        load_config(path=REPO / "configs" / "sac-pendulum.yaml", overrides=["offpolicy.nonsense=1"])
    for name in ("dqn-cartpole", "impala-cartpole", "sac-pendulum", "sac-hopper", "dqn-pong"):
        assert load_config(path=REPO / "configs" / f"{name}.yaml").train.workflow == "offpolicy"


@pytest.mark.skipif(importlib.util.find_spec("ale_py") is None or importlib.util.find_spec("cv2") is None,
                    reason="needs the atari extra (ale-py, opencv)")
def test_pong_config_runs_two_rounds(make_shipped_config) -> None:
    config = make_shipped_config("dqn-pong", overrides=[
        "train.max_rounds=2", "algo.buffer_capacity=2048", "algo.learning_starts=256", "env.num_envs_per_actor=2",
        "actors.scaling.num_actors=2", "actors.fragment_steps=32", "actors.function.cpus=0.5",
        "offpolicy.max_gradient_steps_per_call=4", "offpolicy.max_steps_ahead=256"])
    result = train(config=config)
    assert len(result.rows) == 2 and result.summary.policy_version == 2
    assert result.rows[-1].losses["num_gradient_steps"] == 4
