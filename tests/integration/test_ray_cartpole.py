"""PPO CartPole with ``runtime.backend: ray`` on one shared local Ray instance (num_cpus=2): the shipped config
learns there as ``nimbus train`` runs it, it computes exactly what the local backend computes, and it runs with
every store backend (the ray store: test_ray_cluster.py, across two nodes)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from nimbus.config import NimbusConfig
from nimbus.config.loading import load_config
from nimbus.data import shm
from nimbus.run.loop import train
from nimbus.run.summary import TrainResult

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.ray
# 2 actors × 0.5 CPU + a 1-CPU learner keep all three warm within Ray's 2 logical CPUs.
RAY = ["runtime.backend=ray", "actors.function.cpus=0.5", "learner.function.cpus=1"]
TO_195 = ["train.total_env_steps=30000", "train.target_return=195", "train.return_window=20"]


def shipped(*, root: Path, overrides: list[str]) -> NimbusConfig:
    """configs/ppo-cartpole.yaml as ``nimbus train`` loads it (run/ray_slots.py reads which keys the file sets),
    quiet, writing under ``root``."""
    return load_config(path=REPO / "configs" / "ppo-cartpole.yaml",
                       overrides=[*overrides, f"output.root_dir={root}", "output.loggers=[]", "output.report=false",
                                  "output.status_line=false", "train.eval_episodes=0"])


@pytest.fixture(scope="module")
def shipped_on_ray(ray_local, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TrainResult, str]]:
    """The shipped config trained on Ray until it reaches 195 (one run for the tests that learn and that compare
    it with the local backend), and the segment prefix it ran under."""
    prefix = f"nimbus_{os.getpid()}_shipped_on_ray_"   # its own: conftest's per-test prefix is set after this runs
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(shm.PREFIX_ENV, prefix)
        started = time.monotonic()
        result = train(config=shipped(root=tmp_path_factory.mktemp("ray"), overrides=["runtime.backend=ray", *TO_195]))
        print(f"wall {time.monotonic() - started:.1f} s, {result.summary.env_steps} env steps, "
              f"return {result.summary.final_return}")
    yield result, prefix
    shm.sweep(prefix=prefix)


def test_shipped_cartpole_reaches_195_on_a_2_cpu_private_ray_instance(shipped_on_ray) -> None:
    """runtime/ray_backend.py ``fit_private_instance``: the shipped config's 2 actors (1 CPU each) and its learner
    ask for more CPUs than this instance's 2; their Ray requests are scaled to fit, so every worker stays warm (no
    eviction, no cold start after the prewarm) and the policy learns as on the local backend; should a worker still
    be evicted, its rank's envs go on (actors.restore_slots, turned on for Ray by run/ray_slots.py)."""
    import ray

    result, prefix = shipped_on_ray
    assert ray.cluster_resources()["CPU"] == 2
    # random play's return is ~22 (17.75 at the end of this run with lr 1e-12); seed 0 gets to 195 in round 30
    assert result.summary.stopped_by == "target_return" and result.summary.final_return >= 195, result.summary
    assert result.summary.policy_version == result.summary.rounds   # every round's batch and weights went through
    rows = [json.loads(line) for line in (result.run_dir / "ledger.jsonl").read_text().splitlines()]
    started_workers = {r["worker_id"] for r in rows if r["cold"]}
    cold_attempts = [r for r in rows if r["cold"] and r["attempt"] > 0]
    assert len(started_workers) == 3 and cold_attempts == []   # 2 actors and the learner, pre-warmed, never evicted
    assert result.summary.cold_starts == 3 and result.summary.retries == 0
    saved = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    assert saved["actors"]["restore_slots"] is True   # an evicted actor's episodes would go on (run/ray_slots.py)
    assert shm.list_segments(prefix=prefix) == []


def test_same_seed_gives_the_same_rounds_on_local_and_ray(shipped_on_ray, tmp_path: Path) -> None:
    """The backends differ in where functions run, not in what they compute (P16 across backends). The reference
    runs inline: runtime/inline.py computes the local backend's numbers bit for bit (tests/unit/run/
    test_inline_workflows.py), without forking a worker pool. Three rounds: the first acts on the initial weights,
    the next two on weights the learner made from both actors' batches and published."""
    on_ray, _ = shipped_on_ray
    local = train(config=shipped(root=tmp_path, overrides=["runtime.backend=inline", *TO_195, "train.max_rounds=3"]))
    assert len(local.rows) == 3
    assert [(r.return_mean, r.losses["policy_loss"]) for r in local.rows] == \
        [(r.return_mean, r.losses["policy_loss"]) for r in on_ray.rows[:3]]
    for row in on_ray.rows:  # the framework's share: the round less the slowest actor's work and the gradients
        extras = row.extras
        assert extras["overhead_s"] == pytest.approx(
            max(0.0, row.round_s - extras["actor_work_s"] - extras["compute_s"]))
        assert extras["overhead_share"] == pytest.approx(extras["overhead_s"] / row.round_s)


@pytest.mark.redis
def test_redis_store_on_ray_deletes_each_batch_once_consumed(ray_local, redis_server, make_config) -> None:
    """One actor (one Ray worker fewer to start): the batch is the driver's, whatever the actors."""
    import redis

    server = redis_server()
    client = redis.Redis.from_url(server.url)
    seen: set[str] = set()
    peak = {"batches": 0}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            batches = [k.decode() for k in client.scan_iter("nimbus:*:v:batch/*")]
            seen.update(batches)
            peak["batches"] = max(peak["batches"], len(batches))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    result = train(config=make_config(overrides=RAY + ["store.backend=redis", f"store.url={server.url}",
                                                       "train.max_rounds=3", "actors.scaling.num_actors=1",
                                                       "algo.minibatch_size=128"]))
    done.set()
    watcher.join()
    assert result.summary.rounds == 3
    assert peak["batches"] <= 1 and seen  # one round's batch at a time, each deleted once the learner used it
    assert client.keys("*") == []
