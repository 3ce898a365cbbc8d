"""The gradient learner's host reads (device → host round trips) per gradient: a bound that does not grow with the
network's parameter count. Counted on the CPU with tests/host_reads.py, where each is a point a CUDA stream would
synchronise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.data.codec import Message
from nimbus.data.store import ShmStore
from nimbus.stellaris.learner import GradientRequest, gradient_learner_function
from tests.host_reads import count_host_reads
from tests.unit.function_helpers import cartpole_spaces, ctx, on_store, publish

ROWS = 64


def prepared(store: ShmStore, *, hidden: tuple[int, ...]) -> Message:
    """Version 0 of a PPO net with ``hidden`` layers and one post-processed slice (as the driver puts it) in ``store``;
    a learner request for it, truncated by version 0 as a peer (the truncation's forward pass included)."""
    algo = PPO(config=PPOConfig(hidden_sizes=hidden, minibatch_size=ROWS))
    torch.manual_seed(0)
    model = algo.make_model(spaces=cartpole_spaces())
    publish(store, model=model, version=0)
    generator = np.random.default_rng(0)
    obs = generator.normal(size=(ROWS, 4)).astype(np.float32)
    actions = generator.integers(0, 2, size=ROWS).astype(np.int64)
    with torch.no_grad():
        log_prob, _, values = model.evaluate(torch.as_tensor(obs), actions=torch.as_tensor(actions))
    store.put(key="batch/main/r0/s0", message=Message(header={"postprocessed": True}, arrays={
        "obs": obs, "actions": actions, "log_prob": log_prob.numpy(), "values": values.numpy(),
        "advantages": generator.normal(size=ROWS).astype(np.float32),
        "returns": generator.normal(size=ROWS).astype(np.float32)}))
    request = GradientRequest(env_id="CartPole-v1", env_kwargs={}, algo=algo.config.model_dump(mode="json"),
                              policy="main", policy_version=0, batch_key="batch/main/r0/s0", grad_key="grad/main/0",
                              peer_versions=[0], truncation="paper", rho=1.0, progress=0.0, device="cpu",
                              torch_threads=1)
    return on_store(request.to_task_message(positions=np.arange(ROWS)), store)


@pytest.mark.parametrize("hidden", [(16,), (16, 16, 16, 16)], ids=["2-layers", "5-layers"])
def test_a_gradient_costs_a_few_host_reads_whatever_the_parameter_count(store: ShmStore, hidden) -> None:
    """The loss's statistics (1), the truncated fraction (1), finiteness of the loss and every gradient element
    decided on the device (1) and the gradient copied to the host as one flat tensor (cpu + numpy): 5 whatever the
    layers. Before: a finiteness read per parameter tensor and a copy (cpu, numpy) per parameter tensor: 27 reads for
    2 layers, 63 for 5."""
    request = prepared(store, hidden=hidden)
    context = ctx("gradient_learner")
    gradient_learner_function(context=context, request=request)   # warm: the worker's model and slice are cached
    store.delete(key="grad/main/0")
    with count_host_reads() as reads:
        result = gradient_learner_function(context=context, request=request)
    assert not result.header["nonfinite"]
    assert reads.total <= 5, reads.by_kind
