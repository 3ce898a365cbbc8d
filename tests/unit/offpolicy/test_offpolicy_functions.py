"""The off-policy actor and learner functions, called in-process (no runtime)."""

from __future__ import annotations

import uuid

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.algos.dqn import DQN, DQNConfig
from nimbus.algos.impala.algorithm import Impala
from nimbus.algos.impala.config import ImpalaConfig
from nimbus.algos.sac import SAC, SACConfig
from nimbus.data.buffer import Buffer
from nimbus.data.codec import Message
from nimbus.data.replay import Prioritized
from nimbus.data.store import ShmStore
from nimbus.data.stores import STORE_HEADER
from nimbus.envs.slot_state import SlotState, pop_slot_state
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import model_to_message, weights_key
from nimbus.offpolicy.actor import OffPolicyActorRequest, offpolicy_actor_function
from nimbus.offpolicy.learner import OffPolicyLearnerRequest, offpolicy_learner_function
from nimbus.runtime.base import FunctionContext
from tests.host_reads import HostReads, count_host_reads, decide_on_the_device


def spaces_of(env_id: str) -> EnvSpaces:
    env = gym.make(env_id)
    return EnvSpaces(observation=env.observation_space, action=env.action_space)


def context(name: str) -> FunctionContext:
    return FunctionContext(worker_id="w0", function=name, invocation_id=uuid.uuid4().hex, attempt=1)


def actor_request(*, algo, store: ShmStore, env_id: str, steps: int, seq: int, random_actions: bool = False,
                  num_envs: int = 1, snapshot: bool = False, restore: SlotState | None = None) -> Message:
    request = OffPolicyActorRequest(env_id=env_id, env_kwargs={}, num_envs=num_envs, fragment_steps=steps, seed=3,
                                    actor_rank=0, slot_seq=seq, policy_version=0,
                                    weights_key=weights_key(policy="main", version=0),
                                    algo=algo.config.model_dump(mode="json"), random_actions=random_actions,
                                    snapshot=snapshot)
    message = request.to_message(restore=restore)
    message.header[STORE_HEADER] = {"backend": "shm", "namespace": store.namespace}
    return message


def test_actor_writes_the_true_final_observation_on_truncation(store: ShmStore) -> None:
    algo = SAC(config=SACConfig(hidden_sizes=(8,)))
    store.put(key=weights_key(policy="main", version=0),
              message=model_to_message(model=algo.make_model(spaces=spaces_of("Pendulum-v1")), version=0))
    ctx = context("actor")
    first = offpolicy_actor_function(context=ctx, request=actor_request(algo=algo, store=store, env_id="Pendulum-v1",
                                                                        steps=200, seq=0))
    second = offpolicy_actor_function(context=ctx, request=actor_request(algo=algo, store=store,
                                                                         env_id="Pendulum-v1", steps=5, seq=1))
    rows, more = first.arrays, second.arrays
    assert set(rows) == {"obs", "actions", "rewards", "next_obs", "terminated", "truncated"}
    assert rows["truncated"][-1] and not rows["truncated"][:-1].any() and not rows["terminated"].any()
    assert np.allclose(rows["next_obs"][:-1], rows["obs"][1:])           # s' of step t is s of step t+1
    assert not np.allclose(rows["next_obs"][-1], more["obs"][0])         # not the next episode's reset
    assert np.allclose(rows["next_obs"][-1, 0] ** 2 + rows["next_obs"][-1, 1] ** 2, 1.0, atol=1e-5)  # a real state
    assert first.header["episode_returns"] and first.header["env_steps"] == 200
    assert (np.abs(rows["actions"]) <= 2.0).all()


def test_a_fresh_worker_restores_the_slot_and_its_episodes_continue(store: ShmStore) -> None:
    """actors.restore_slots for transition actors (IMPACT under stellaris): fragment 1 on a worker that never
    saw the rank, given fragment 0's slot, is the fragment 1 the first worker samples."""
    algo = Impala(config=ImpalaConfig(variant="impact", hidden_sizes=(8,), rollout_length=40))
    store.put(key=weights_key(policy="main", version=0),
              message=model_to_message(model=algo.make_model(spaces=spaces_of("CartPole-v1")), version=0))
    kwargs = {"algo": algo, "store": store, "env_id": "CartPole-v1", "steps": 40, "num_envs": 2, "snapshot": True}
    warm = context("actor")
    first = offpolicy_actor_function(context=warm, request=actor_request(seq=0, **kwargs))
    slot = pop_slot_state(header=first.header, arrays=first.arrays)
    assert slot is not None and set(first.arrays) == {"obs", "actions", "rewards", "next_obs", "terminated",
                                                      "truncated", "behaviour_log_prob"}
    assert first.header["episode_returns"]   # episodes ended inside fragment 0, others run on
    on_warm = offpolicy_actor_function(context=warm, request=actor_request(seq=1, **kwargs))
    restored = offpolicy_actor_function(context=context("actor"), request=actor_request(seq=1, restore=slot, **kwargs))
    fresh = offpolicy_actor_function(context=context("actor"), request=actor_request(seq=1, **kwargs))
    for key in ("obs", "actions", "rewards"):
        assert np.array_equal(restored.arrays[key], on_warm.arrays[key]), key
    assert restored.header["episode_returns"] == on_warm.header["episode_returns"]
    assert not np.array_equal(fresh.arrays["obs"], on_warm.arrays["obs"])   # without the slot: new episodes


def test_actor_random_actions_cover_the_action_space(store: ShmStore) -> None:
    algo = SAC(config=SACConfig(hidden_sizes=(8,)))
    store.put(key=weights_key(policy="main", version=0),
              message=model_to_message(model=algo.make_model(spaces=spaces_of("Pendulum-v1")), version=0))
    out = offpolicy_actor_function(context=context("actor"), request=actor_request(
        algo=algo, store=store, env_id="Pendulum-v1", steps=100, seq=0, random_actions=True, num_envs=2))
    actions = out.arrays["actions"]
    assert actions.shape == (200, 1) and actions.min() < -1.5 and actions.max() > 1.5
    assert out.header["random_actions"] is True


def test_dqn_actor_takes_epsilon_from_the_model(store: ShmStore) -> None:
    algo = DQN(config=DQNConfig(hidden_sizes=(8,), batch_size=4, buffer_capacity=64))
    model = algo.make_model(spaces=spaces_of("CartPole-v1"))
    model.epsilon.fill_(0.0)  # greedy: every action is the argmax of a fixed network
    store.put(key=weights_key(policy="main", version=0), message=model_to_message(model=model, version=0))
    out = offpolicy_actor_function(context=context("actor"), request=actor_request(
        algo=algo, store=store, env_id="CartPole-v1", steps=30, seq=0))
    greedy = model.q(torch.as_tensor(out.arrays["obs"])).argmax(dim=1).numpy()
    assert np.array_equal(out.arrays["actions"], greedy)


def test_learner_drops_overwritten_rows_and_returns_td_errors(store: ShmStore) -> None:
    spaces = spaces_of("CartPole-v1")
    algo = DQN(config=DQNConfig(hidden_sizes=(8,), batch_size=4, buffer_capacity=16, prioritized=True))
    store.put(key=weights_key(policy="main", version=0),
              message=model_to_message(model=algo.make_model(spaces=spaces), version=0))
    with Buffer.create(spec=algo.buffer_spec(spaces=spaces), capacity_rows=16, max_actors=4) as buffer:
        def ingest(n: int) -> None:
            buffer.ingest(invocation_id=uuid.uuid4().hex, actor_rank=0, policy_version=0, arrays={
                "obs": np.random.rand(n, 4).astype(np.float32), "actions": np.zeros(n, np.int64),
                "rewards": np.ones(n, np.float32), "next_obs": np.random.rand(n, 4).astype(np.float32),
                "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool)})
        ingest(16)
        replay = Prioritized(capacity_rows=16, batch_rows=8, seed=0)
        batch = replay.sample(buffer=buffer)
        ingest(4)                                             # positions 0-3 now hold newer rows
        request = OffPolicyLearnerRequest(
            env_id="CartPole-v1", env_kwargs={}, algo=algo.config.model_dump(mode="json"), policy="main",
            policy_version=0, has_optimizer_state=False, buffer=buffer.descriptor(), progress=0.5, seed=0,
            device="cpu", torch_threads=1, return_td_errors=True).to_batch_message(batch=batch)
        request.header[STORE_HEADER] = {"backend": "shm", "namespace": store.namespace}
        result = offpolicy_learner_function(context=context("learner"), request=request)
    kept = result.arrays["kept"]
    assert np.array_equal(kept, batch.indices >= 4) and not kept.all()  # stratified: the first draw is in [0, 2)
    assert result.header["stale_rows"] == int((~kept).sum()) and result.header["rows"] == int(kept.sum())
    assert result.arrays["td_errors"].shape == (int(kept.sum()),)
    assert result.header["policy_version"] == 1 and store.get(key=weights_key(policy="main", version=1))


def _learner_reads(*, store: ShmStore, hidden_sizes: tuple[int, ...]) -> HostReads:
    """Host reads of a steady (second, warm) DQN learner invocation, the publishing copies left out: a model's
    weights and optimizer state must reach the host once per tensor (``cpu``, ``numpy``) to be published."""
    spaces = spaces_of("CartPole-v1")
    algo = DQN(config=DQNConfig(hidden_sizes=hidden_sizes, batch_size=8, buffer_capacity=32, gradient_steps=2))
    policy = f"depth{len(hidden_sizes)}"
    store.put(key=weights_key(policy=policy, version=0),
              message=model_to_message(model=algo.make_model(spaces=spaces), version=0))
    ctx = context("learner")
    with Buffer.create(spec=algo.buffer_spec(spaces=spaces), capacity_rows=32, max_actors=1) as buffer:
        rng = np.random.default_rng(0)
        buffer.ingest(invocation_id=uuid.uuid4().hex, actor_rank=0, policy_version=0, arrays={
            "obs": rng.random((32, 4), np.float32), "actions": rng.integers(0, 2, 32),
            "rewards": np.ones(32, np.float32), "next_obs": rng.random((32, 4), np.float32),
            "terminated": np.zeros(32, bool), "truncated": np.zeros(32, bool)})

        def invoke(version: int) -> Message:
            batch = Prioritized(capacity_rows=32, batch_rows=16, seed=version).sample(buffer=buffer)
            request = OffPolicyLearnerRequest(
                env_id="CartPole-v1", env_kwargs={}, algo=algo.config.model_dump(mode="json"), policy=policy,
                policy_version=version, has_optimizer_state=version > 0, buffer=buffer.descriptor(), progress=0.5,
                seed=0, device="cpu", torch_threads=1).to_batch_message(batch=batch)
            request.header[STORE_HEADER] = {"backend": "shm", "namespace": store.namespace}
            return offpolicy_learner_function(context=ctx, request=request)

        invoke(0)   # builds the model and the optimizer's state: count a steady invocation
        with count_host_reads(optimizers=[ctx.cache["optimizer"]]) as reads:
            result = invoke(1)
    assert result.header["policy_version"] == 2 and not result.header["nonfinite"]
    for kind in ("cpu", "numpy"):
        reads.by_kind.pop(kind, None)
    return reads


def test_learner_checks_the_updated_weights_with_one_host_read_not_one_per_tensor(
        store: ShmStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the update the learner checks that the weights are finite: with 4 parameter tensors or 10 it reads the
    host as often (the update's own reads and that one check), counted as an accelerator runs the update."""
    decide_on_the_device(monkeypatch)
    few, many = (_learner_reads(store=store, hidden_sizes=sizes) for sizes in ((8,), (8, 8, 8, 8)))
    assert many.total == few.total <= 2 + 1, (few.by_kind, many.by_kind)   # the DQN update's 2, the check
