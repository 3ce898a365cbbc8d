"""A warm learner computes with its ``torch_threads`` on every invocation (the runtime clamps that to the function's
cpus), not only on the one that built its state: another function served by the same worker may have left the
process at another count."""

from __future__ import annotations

import uuid

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.data.buffer import Buffer
from nimbus.data.store import ShmStore
from nimbus.data.stores import STORE_HEADER
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import model_to_message, weights_key
from nimbus.onpolicy.learner import learner_function
from nimbus.roles.learner import LearnerRequest
from nimbus.runtime.base import FunctionContext
from tests.algo_batches import host_batch


def test_every_invocation_sets_the_learner_threads(store: ShmStore, monkeypatch) -> None:
    env = gym.make("CartPole-v1")
    spaces = EnvSpaces(observation=env.observation_space, action=env.action_space)
    algo = PPO(config=PPOConfig(num_epochs=1, minibatch_size=32, hidden_sizes=(8,)))
    store.put(key=weights_key(policy="main", version=0),
              message=model_to_message(model=algo.make_model(spaces=spaces), version=0))
    seen: list[int] = []
    real_update = PPO.update
    monkeypatch.setattr(PPO, "update", lambda self, **kw: (seen.append(torch.get_num_threads()),
                                                           real_update(self, **kw))[1])
    cache: dict = {}
    threads_before = torch.get_num_threads()
    try:
        with Buffer.create(spec=algo.buffer_spec(spaces=spaces), capacity_rows=64, max_actors=1) as buffer:
            buffer.ingest(invocation_id=uuid.uuid4().hex, actor_rank=0, policy_version=0,
                          arrays=host_batch(algo=algo, spaces=spaces, seed=0))
            for version in (0, 1):
                torch.set_num_threads(1)   # what another function left behind in this worker
                request = LearnerRequest(env_id="CartPole-v1", env_kwargs={}, algo=algo.config.model_dump(mode="json"),
                                         policy="main", policy_version=version, has_optimizer_state=version > 0,
                                         buffer=buffer.descriptor(), progress=0.0, seed=0, device="cpu",
                                         torch_threads=2).to_message(indices=np.arange(64))
                request.header[STORE_HEADER] = {"backend": "shm", "namespace": store.namespace}
                learner_function(context=FunctionContext(worker_id="w0", function="learner",
                                                         invocation_id=uuid.uuid4().hex, attempt=1, cache=cache),
                                 request=request)
    finally:
        torch.set_num_threads(threads_before)
    assert seen == [2, 2]
