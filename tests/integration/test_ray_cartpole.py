"""PPO CartPole with ``runtime.backend: ray`` on one shared local Ray instance (num_cpus=2): it computes exactly
what the local backend computes, and it runs with every store backend. That it learns there, with the ray store
carrying its weights and batches: test_ray_small_machine.py."""

from __future__ import annotations

import threading
import time

import pytest

from nimbus.run.loop import train

pytestmark = pytest.mark.ray
# 2 actors × 0.5 CPU + a 1-CPU learner keep all three warm within Ray's 2 logical CPUs.
RAY = ["runtime.backend=ray", "actors.function.cpus=0.5", "learner.function.cpus=1"]


def test_same_seed_gives_the_same_rounds_on_local_and_ray(ray_local, make_config) -> None:
    """The backends differ in where functions run, not in what they compute (P16 across backends). The reference
    runs inline: runtime/inline.py computes the local backend's numbers bit for bit (tests/unit/run/
    test_inline_workflows.py), without forking a worker pool. Three rounds: the first acts on the initial weights,
    the next two on weights the learner made from both actors' batches and published."""
    common = ["train.max_rounds=3", "actors.function.cpus=0.5", "learner.function.cpus=1"]
    local, on_ray = (train(config=make_config(overrides=common + extra))
                     for extra in (["runtime.backend=inline"], ["runtime.backend=ray"]))
    assert len(on_ray.rows) == 3
    assert [(r.return_mean, r.losses["policy_loss"]) for r in local.rows] == \
        [(r.return_mean, r.losses["policy_loss"]) for r in on_ray.rows]
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
