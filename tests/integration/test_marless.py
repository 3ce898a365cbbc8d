"""MARLess end to end: IPPO learns simple_spread (inline), a killed policy function is retried (local backend), the
same config runs on a local Ray instance; the value-based algorithms' functions, sharing (the agent→policy map and
with it the learner invocations) and the actor-scaling rule are workflow logic and run inline (runtime/inline.py;
the learner split is tests/unit/run/test_inline_workflows.py's); a bad agent→policy map exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nimbus.errors import ConfigError
from nimbus.marless.scaling import actor_count
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.runtime.faults import FAULTS_ENV, read_counter
from support import ledger_rows

pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
# uniform-random play averages -27.0 per agent and episode (simple_spread N=3, max_cycles 25; docs/marless.md), sd
# 0.7 over 100-episode means: the bar is 3.4 of them above it
BAR = -24.6
SMALL = ["env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}", "algo.num_epochs=2",
         "train.eval_episodes=0"]
INLINE = "runtime.backend=inline"   # logic-only tests: functions run in the driver (runtime/inline.py), no forks


def maps(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "marless.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_ippo_learns_simple_spread(make_shipped_config) -> None:
    """The uniform-random policy averages -27.0, with a standard deviation of 1.1 over 40-episode means, so 0.7 over
    100-episode means: the bar, -24.6, is 3.4 of them above it. (-23.6 over 40 episodes failed once, at -23.63.)
    Inline (runtime/inline.py: the functions' code in the driver, invocations in submission order, so the run
    repeats): learning is the subject, not the 10 worker processes per round. The run stops on a periodic greedy
    evaluation (100 episodes every 24 000 env steps) passing the bar, and the final evaluation (100 other episodes)
    must pass it too. Measured with the shipped config (seeds 0, 1, 2): the periodic evaluations rose from -42 to
    -24.15 at 24k env steps, -23.55 at 36k and -23.52 at 30k; the final evaluations gave -23.09, -22.88 and
    -23.01 (48, 76 and 66 CPU s at load 4-8; the 60k-step run this test used before took ~100 s in `make test`).
    Every 24 000 rather than 6 000 env steps: seed 0 first passes at 24k (−42 at 12k), so the evaluations at 6k, 12k
    and 18k (~2 s each) only cost time, and evaluating does not change the training (runtime/inline.py: no call runs
    meanwhile).
    The shipped config's return at 60k env steps (-21.9, -21.7, -22.1 over 40 episodes, seeds 0-2) is in
    docs/marless.md."""
    config = make_shipped_config("marless-ippo-spread", overrides=[
        "train.total_env_steps=60000", "train.eval_every_env_steps=24000", "train.eval_episodes=100",
        f"train.target_eval_return={BAR}", INLINE])
    result = train(config=config)
    assert result.summary.stopped_by == "target_eval_return", result.summary
    assert result.summary.eval_return is not None and result.summary.eval_return > BAR, result.summary
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert {row["num_learners"] for row in rows} == {3}


@pytest.mark.parametrize(("algo", "expected"), [
    ("iql", {"actor": 3, "postprocess": 0, "critic": 0, "policy": 9}),   # a policy function per policy and round
    ("vdn", {"actor": 3, "postprocess": 3, "critic": 0, "policy": 3}),   # one post-processing, one team update a round
    ("qmix", {"actor": 3, "postprocess": 3, "critic": 0, "policy": 3}),
])
def test_value_based_algorithms_run_their_own_functions(make_shipped_config, algo: str, expected: dict) -> None:
    config = make_shipped_config(f"marless-{algo}-spread", overrides=[   # a policy per agent (VDN/QMIX ship full)
        *SMALL[:2], "train.max_rounds=3", "train.eval_episodes=0", "algo.learning_starts=100", "algo.gradient_steps=5",
        "marless.sharing=none", INLINE])
    result = train(config=config)
    ok = [r for r in ledger_rows(result.run_dir) if r["outcome"] == "ok"]
    assert {kind: sum(r["kind"] == kind for r in ok) for kind in expected} == expected
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert [row["policy_version"] for row in rows] == [3, 6, 9]
    assert all(np.isfinite(row["losses"]["p_agent_1/policy_loss"]) for row in rows[1:])   # gradient steps were taken
    assert rows[-1]["losses"]["p_agent_1/grad_steps"] == 10


def test_static_sharing_trains_one_policy(make_shipped_config) -> None:
    config = make_shipped_config("marless-ippo-spread", overrides=[
        *SMALL, "train.max_rounds=2", "marless.sharing=static", INLINE])
    result = train(config=config)
    ok = [r for r in ledger_rows(result.run_dir) if r["outcome"] == "ok"]
    assert sum(r["kind"] == "policy" for r in ok) == 2 and sum(r["kind"] == "critic" for r in ok) == 2
    assert all(m["agent_policy"] == {"agent_0": "p_agent_0", "agent_1": "p_agent_0", "agent_2": "p_agent_0"}
               for m in maps(result.run_dir))


def test_dynamic_sharing_switches_on_and_cuts_learner_invocations(make_shipped_config) -> None:
    """γ above any slope: the detector toggles whenever its window (2 rounds) fills: off → on (2 groups,
    the first enabling) → off; learner invocations follow the number of policies."""
    config = make_shipped_config("marless-ippo-spread", overrides=[
        *SMALL, "train.max_rounds=6", "marless.sharing=marless", "marless.window=2", "marless.gamma=100", INLINE])
    result = train(config=config)
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    policies = [int(row["extras"]["marless/policies"]) for row in rows]
    assert policies == [3, 3, 2, 2, 3, 3]
    learner_calls = sum(r["kind"] in ("critic", "policy") and r["outcome"] == "ok" for r in ledger_rows(result.run_dir))
    assert learner_calls == 2 * sum(policies)        # a critic and a policy function per policy and round
    shared = maps(result.run_dir)[2]["agent_policy"]
    assert len(set(shared.values())) == 2
    probed = [[p for p in sorted(row["losses"]) if p.endswith("/probe_rows") and row["losses"][p] > 0] for row in rows]
    assert [bool(names) for names in probed] == [False, True, False, False, False, True]   # the rounds it enables
    assert all(np.isfinite(row["losses"][name.replace("/probe_rows", "/convexity")])
               for row, names in zip(rows, probed) for name in names)


def test_the_scaling_rule_sets_the_next_rounds_actors(make_shipped_config) -> None:
    config = make_shipped_config("marless-ippo-spread", overrides=[
        *SMALL, "train.max_rounds=5", "marless.scaling=marless", "marless.i_max=4", "marless.i_min=1",
        "marless.beta=0.5", INLINE])
    result = train(config=config)
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert rows[0]["num_actors"] == 1                      # round 0: no evidence, I_min
    for row, after in zip(rows, rows[1:]):
        per_policy = [int(v) for k, v in row["extras"].items() if k.startswith("marless/actors/")]
        assert after["num_actors"] == actor_count(per_policy=per_policy, i_min=1, i_max=4, beta=0.5)
    assert sum(r["kind"] == "actor" and r["outcome"] == "ok" for r in ledger_rows(result.run_dir)) == \
        sum(row["num_actors"] for row in rows)


def test_a_policy_function_killed_after_its_put_is_retried_and_counted_once(
        make_shipped_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On forked workers (the kill is the subject). One policy (static sharing): its policy function is killed in
    round 1, right after its put of version 2; the retry's put replaces it, the version is counted once, and 2
    learner workers start instead of 6."""
    counter = tmp_path / "counter"
    monkeypatch.setenv(FAULTS_ENV, json.dumps({"marless.policy.published": {"action": "kill", "after": 1, "times": 1,
                                                                         "counter_path": str(counter)}}))
    config = make_shipped_config("marless-ippo-spread",
                                 overrides=[*SMALL, "train.max_rounds=2", "marless.sharing=static"])
    result = train(config=config)
    assert read_counter(path=counter) == 2
    policy = [r for r in ledger_rows(result.run_dir) if r["kind"] == "policy"]
    died = [r for r in policy if r["outcome"] == "worker_died"]
    assert len(died) == 1
    retry = [r for r in policy if r["invocation_id"] == died[0]["invocation_id"] and r["outcome"] == "ok"]
    assert [r["attempt"] for r in retry] == [2]
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert [row["policy_version"] for row in rows] == [1, 2]           # the policy advanced once per round
    assert [row["extras"]["marless/learner_invocations"] for row in rows] == [2.0, 2.0]


def test_a_map_naming_an_unknown_policy_is_a_config_error(make_shipped_config) -> None:
    config = make_shipped_config("marless-ippo-spread", overrides=["marless.agent_policy={agent_0: p_agent_9}"])
    with pytest.raises(ConfigError, match=r"marless\.agent_policy\.agent_0"):
        train(config=config)


@pytest.mark.parametrize(("override", "message"), [
    ("algo={name: ppo}", "train.workflow: marless runs"),
    ("train.workflow=onpolicy", "needs train.workflow: marless"),
    ("marless.i_min=9", "i_min"),
])
def test_config_errors_name_the_key(make_shipped_config, override: str, message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        make_shipped_config("marless-ippo-spread", overrides=[override])


@pytest.mark.ray
def test_the_same_config_runs_on_ray(ray_local, make_shipped_config) -> None:
    """Each kind of MARLess function (actor, critic, policy) on Ray; static sharing: one critic and one policy
    function, 3 Ray workers to start instead of 7 (a Ray worker's start, torch included, is most of this test)."""
    config = make_shipped_config("marless-ippo-spread", overrides=[
        *SMALL, "train.max_rounds=2", "runtime.backend=ray", "actors.function.cpus=0.25", "learner.function.cpus=0.25",
        "functions.critic={cpus: 0.25}", "marless.sharing=static"])
    result = train(config=config)
    assert result.summary.rounds == 2
    ok = [r for r in ledger_rows(result.run_dir) if r["outcome"] == "ok"]
    assert sum(r["kind"] == "policy" for r in ok) == 2 and sum(r["kind"] == "critic" for r in ok) == 2
    assert sum(r["kind"] == "actor" for r in ok) == 2
