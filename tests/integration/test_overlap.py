"""train.overlap: the next round's actors sample while the learner trains (one version of lag), and PPO still learns."""

from __future__ import annotations

import json

from nimbus.run.loop import train


def _invocations(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    return [row for row in rows if row["function"] in ("actor", "learner") and row.get("outcome", "ok") == "ok"]


def _overlapped_learners(rows: list[dict]) -> int:
    """Learner invocations during which at least one actor invocation started (an actor invoked beside the learner
    may start in the same clock tick as it: the ledger's times are equal then, so the interval is closed there)."""
    learners = [row for row in rows if row["function"] == "learner"]
    actor_starts = [row["start_at"] for row in rows if row["function"] == "actor"]
    return sum(any(row["start_at"] <= start < row["end_at"] for start in actor_starts) for row in learners)


def test_actors_sample_the_next_round_while_the_learner_trains(make_config) -> None:
    """Local workers (forked): every learner but the last has the next round's actors started during it; without
    the option no actor starts while a learner runs. Each round still holds one round's rows and one version."""
    overlapped = train(config=make_config(overrides=["train.max_rounds=4", "train.overlap=true"]))
    plain = train(config=make_config(overrides=["train.max_rounds=4"]))
    assert _overlapped_learners(_invocations(plain.run_dir)) == 0
    assert _overlapped_learners(_invocations(overlapped.run_dir)) >= 3
    assert [row.env_steps for row in overlapped.rows] == [row.env_steps for row in plain.rows]
    assert [row.policy_version for row in overlapped.rows] == [1, 2, 3, 4]


def test_ppo_learns_cartpole_with_one_version_of_lag(make_config) -> None:
    config = make_config(overrides=["train.overlap=true", "train.total_env_steps=60000", "train.target_return=195",
                                    "train.return_window=20"])
    result = train(config=config)
    assert result.summary.final_return is not None and result.summary.final_return >= 195, result.summary
