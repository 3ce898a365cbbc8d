"""RELIABILITY.md P5 (liveness) and P4 (losing actors) on whole PPO CartPole runs."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from nimbus.data.buffer import Buffer
from nimbus.errors import FunctionFailed
from nimbus.run.loop import train
from support import ledger_rows


def test_env_sleeping_forever_in_step_is_named_and_stops_the_run(make_config, caplog) -> None:
    """P5: step() never returns; the actor goes silent, is named, killed, retried, and the run fails in
    seconds, not after timeout_s (120 s) x attempts."""
    config = make_config(overrides=["env.id=nimbus/SleepyCartPole-v0", "env.kwargs={sleep_at_step: 3}",
                                    "actors.function.heartbeat_s=0.5", "actors.function.max_retries=1"])
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="nimbus.runtime.local"), \
            pytest.raises(FunctionFailed, match="Stalled"):
        train(config=config)
    assert time.monotonic() - started < 60
    alerts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("liveness:")]
    assert alerts and all("actor attempt" in a and "no heartbeat for 3 x heartbeat_s=0.5" in a for a in alerts)


# A worker for each of the 4 actors and the learner: at the default max_workers (2 x 2 cores = 4) a worker was
# evicted every round, a rank whose worker had gone started fresh envs elsewhere (step counts from 0), and in a
# clean-clone run no env reached its 71st step in 5 rounds: no kill, no worker_died row
WARM_POOL = "runtime.max_workers=5"


def test_sigkill_of_one_of_four_actors_and_the_retry_samples_a_current_policy(make_config, tmp_path: Path,
                                                                             monkeypatch) -> None:
    """P4: an actor worker SIGKILLed mid-rollout in round 2 (of 4 actors): the run goes on to its last round,
    and the restarted actor's first trajectory carries a policy_version >= the driver's version when it
    restarted (the learner results that had ended by then)."""
    ingested: list[tuple[str, int, float]] = []
    original = Buffer.ingest

    def recording_ingest(self, *, invocation_id: str, actor_rank: int, policy_version: int, **kwargs):
        ingested.append((invocation_id, policy_version, time.time()))
        return original(self, invocation_id=invocation_id, actor_rank=actor_rank, policy_version=policy_version,
                        **kwargs)

    monkeypatch.setattr(Buffer, "ingest", recording_ingest)
    counter = tmp_path / "counter"
    steps_before_kill = 2 * 32 + 7  # round 2 of the killed rank (32 steps per env per round)
    config = make_config(overrides=["env.id=nimbus/KillerCartPole-v0", "actors.scaling.num_actors=4", WARM_POOL,
                                    "train.max_rounds=5", "env.num_envs_per_actor=2",
                                    f"env.kwargs={{counter_path: {counter}, failures: 1, "
                                    f"fail_at_step: {steps_before_kill}}}"])
    result = train(config=config)
    assert result.summary.rounds == 5 and result.summary.env_steps == 5 * 4 * 2 * 32  # training went on
    rows = ledger_rows(result.run_dir)
    (died,) = [r for r in rows if r["outcome"] == "worker_died"]
    (retry,) = [r for r in rows if r["invocation_id"] == died["invocation_id"] and r["attempt"] == 2]
    assert retry["outcome"] == "ok" and retry["worker_id"] != died["worker_id"]  # served elsewhere
    learner_ends = [r["end_at"] for r in rows if r["function"] == "learner" and r["outcome"] == "ok"]
    version_at_restart = sum(end <= retry["start_at"] for end in learner_ends)
    (first_trajectory,) = [v for inv, v, _ in ingested if inv == died["invocation_id"]]
    assert version_at_restart >= 1 and first_trajectory >= version_at_restart
