"""The ``ray`` runtime on a two-node ``ray.cluster_utils.Cluster``: functions spread over nodes, and PPO
CartPole computes there, with the ARTOS buffer on the driver's node and batches and weights in the ray store,
exactly what it computes in one process."""

from __future__ import annotations

import pytest

from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.run.loop import train
from nimbus.runtime.base import FunctionSpec, Resources

pytestmark = pytest.mark.ray


def test_workers_are_placed_on_both_nodes_by_their_resources(ray_two_nodes) -> None:
    from nimbus.runtime.ray_backend import RayRuntime

    runtime = RayRuntime(ledger=Ledger(), address=ray_two_nodes.address)
    try:
        spec = FunctionSpec(name="sleep", entrypoint="nimbus.runtime.builtin:sleep",
                            resources=Resources(cpus=1.0, memory_mb=256), timeout_s=60.0)
        futures = runtime.map(spec=spec, requests=[Message(header={"seconds": 1.0}) for _ in range(3)])
        assert len({f.result(timeout=120).header["pid"] for f in futures}) == 3
        assert len({w["node_id"] for w in runtime.workers().values()}) == 2  # 3 CPUs = head 1 + worker 2
    finally:
        runtime.shutdown()
    assert runtime.start.started is False  # joined, not started: the cluster is not ours to stop


def test_ppo_cartpole_across_two_nodes_computes_what_one_process_computes(ray_two_nodes, make_config) -> None:
    """Three 1-CPU functions on 1 + 2 CPUs: the learner and the actors cannot all share a node, so batches and
    weights cross nodes through the ray store. Every round equals the inline run's bit for bit (a lost, reordered or
    stale batch or weights would change the returns or the loss); the learning itself is test_ray_cartpole.py's."""
    common = ["train.max_rounds=3", "actors.function.cpus=1", "learner.function.cpus=1",
              "actors.function.memory_mb=512", "learner.function.memory_mb=512"]
    inline = train(config=make_config(overrides=common + ["runtime.backend=inline"]))
    across = train(config=make_config(overrides=common + ["runtime.backend=ray", "store.backend=ray",
                                                          f"runtime.address={ray_two_nodes.address}"]))
    assert [(r.return_mean, r.losses["policy_loss"]) for r in across.rows] == \
        [(r.return_mean, r.losses["policy_loss"]) for r in inline.rows]
    assert across.summary.rounds == across.summary.policy_version == 3 and across.summary.retries == 0
