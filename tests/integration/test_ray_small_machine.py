"""The shipped PPO CartPole config on a 2-CPU private Ray instance (runtime/ray_backend.py
``fit_private_instance``): its 2 actors (1 CPU each) and its learner ask for more CPUs than 2; their Ray requests are
scaled to fit, so every worker stays warm (no eviction, no cold start after the first round's) and the policy
learns as on the local backend, every round's batch and weights going through the ray store; should a worker still
be evicted, its rank's envs go on (actors.restore_slots, turned on for Ray by run/ray_slots.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from nimbus.config.loading import load_config
from nimbus.data.shm import list_segments, run_prefix
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.ray


def test_shipped_cartpole_reaches_195_on_a_2_cpu_private_ray_instance_with_the_ray_store(ray_local,
                                                                                         tmp_path: Path) -> None:
    import ray

    assert ray.cluster_resources()["CPU"] == 2
    config = load_config(path=REPO / "configs" / "ppo-cartpole.yaml",   # as `nimbus train` loads it
                         overrides=["runtime.backend=ray", "store.backend=ray", "train.total_env_steps=30000",
                                    "train.target_return=195", "train.return_window=20", f"output.root_dir={tmp_path}",
                                    "output.loggers=[]", "output.report=false", "output.status_line=false",
                                    "train.eval_episodes=0"])
    started = time.monotonic()
    result = train(config=config)
    wall_s = time.monotonic() - started
    # random play's return is ~22; seed 0 gets to 195 in 30 rounds (7680 env steps)
    assert result.summary.stopped_by == "target_return" and result.summary.final_return >= 195, result.summary
    assert result.summary.policy_version == result.summary.rounds   # every round's batch and weights went through
    rows = [json.loads(line) for line in (result.run_dir / "ledger.jsonl").read_text().splitlines()]
    started_workers = {r["worker_id"] for r in rows if r["cold"]}
    cold_attempts = [r for r in rows if r["cold"] and r["attempt"] > 0]
    print(f"wall {wall_s:.1f} s, {result.summary.env_steps} env steps, return {result.summary.final_return}, "
          f"workers started {sorted(started_workers)}, cold attempts {len(cold_attempts)}")
    assert len(started_workers) == 3 and cold_attempts == []   # 2 actors and the learner, pre-warmed, never evicted
    assert result.summary.cold_starts == 3 and result.summary.retries == 0
    saved = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    assert saved["actors"]["restore_slots"] is True   # an evicted actor's episodes would go on (run/ray_slots.py)
    assert list_segments(prefix=run_prefix()) == []
