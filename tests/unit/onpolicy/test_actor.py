"""The on-policy actor function, called in-process (no runtime): what its rows promise the learner's GAE."""

from __future__ import annotations

import importlib.util
import uuid

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.data.store import ShmStore
from nimbus.data.stores import STORE_HEADER
from nimbus.envs.slot_state import pop_slot_state
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import model_to_message, weights_key
from nimbus.onpolicy.actor import actor_function
from nimbus.roles.actor import ActorRequest, derive_seed
from nimbus.runtime.base import FunctionContext

EPISODE_STEPS = 5  # CartPole truncated at 5 steps: a random policy almost never falls that soon


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """actor_function sets torch's thread count for its worker; called in-process it must not leak into the
    tests after it (a driver with 1 thread forks workers with 1: the snapshots' float sums then differ)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_a_truncated_episode_bootstraps_from_its_final_observation_not_the_reset_one() -> None:
    """next_values of a truncated step is V(final observation); the next row's obs (the reset) would be wrong."""
    algo = PPO(config=PPOConfig())
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    model = algo.make_model(spaces=EnvSpaces(observation=env.observation_space, action=env.action_space))
    num_envs, steps = 2, 12
    with ShmStore(namespace="actor", owner=True) as store:
        store.put(key=weights_key(policy="main", version=0), message=model_to_message(model=model, version=0))
        request = ActorRequest(env_id="CartPole-v1", env_kwargs={"max_episode_steps": EPISODE_STEPS},
                               num_envs=num_envs, fragment_steps=steps, seed=7, actor_rank=0, slot_seq=0,
                               policy_version=0, weights_key=weights_key(policy="main", version=0),
                               algo=algo.config.model_dump(mode="json")).to_message()
        request.header[STORE_HEADER] = {"backend": "shm", "namespace": "actor"}
        context = FunctionContext(worker_id="w0", function="actor", invocation_id="i0", attempt=1)
        rows = {k: v.reshape(num_envs, steps, *v.shape[1:]) for k, v in
                actor_function(context=context, request=request).arrays.items()}
    truncations = 0
    for i in range(num_envs):  # replay env i with the recorded actions to see each episode's final observation
        replay = gym.make("CartPole-v1", max_episode_steps=EPISODE_STEPS)
        seed = (derive_seed(7, 0, 0) + i) % (2**31)
        obs, _ = replay.reset(seed=seed)
        for t in range(steps):
            np.testing.assert_array_equal(rows["obs"][i, t], obs)
            obs, _, terminated, truncated, _ = replay.step(int(rows["actions"][i, t]))
            assert (terminated, truncated) == (rows["terminated"][i, t], rows["truncated"][i, t])
            with torch.no_grad():
                final_value = float(model.value(torch.as_tensor(obs[None], dtype=torch.float32)).reshape(()))
            if truncated and not terminated:
                truncations += 1
                assert t + 1 < steps, "choose steps so that truncations fall inside the fragment"
                reset_value = float(rows["values"][i, t + 1])
                assert abs(final_value - reset_value) > 1e-4  # the two candidates differ: the check discriminates
                assert rows["next_values"][i, t] == pytest.approx(final_value, abs=1e-6)
            elif t + 1 < steps and not terminated:
                assert rows["next_values"][i, t] == rows["values"][i, t + 1]
            if terminated or truncated:
                obs, _ = replay.reset()
        assert rows["next_values"][i, -1] == pytest.approx(final_value, abs=1e-6)  # the fragment's end: V(next obs)
    assert truncations >= 2 * num_envs


def _fragments(*, backend: str, fragments: int = 2, num_envs: int = 3, steps: int = 40) -> list[dict[str, np.ndarray]]:
    """``fragments`` consecutive fragments of one actor rank (a warm worker) with ``actors.env_backend``."""
    torch.set_num_threads(1)   # as in a worker (the fixture restores it): float sums depend on the thread count
    algo = PPO(config=PPOConfig())
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    model = algo.make_model(spaces=EnvSpaces(observation=env.observation_space, action=env.action_space))
    context = FunctionContext(worker_id="w0", function="actor", invocation_id="i0", attempt=1)
    results, namespace = [], uuid.uuid4().hex[:8]   # function_store caches a store per namespace: a fresh one
    with ShmStore(namespace=namespace, owner=True) as store:
        store.put(key=weights_key(policy="main", version=0), message=model_to_message(model=model, version=0))
        for seq in range(fragments):
            request = ActorRequest(env_id="CartPole-v1", env_kwargs={}, num_envs=num_envs, fragment_steps=steps,
                                   seed=7, actor_rank=0, slot_seq=seq, policy_version=0,
                                   weights_key=weights_key(policy="main", version=0),
                                   algo=algo.config.model_dump(mode="json"), env_backend=backend).to_message()
            request.header[STORE_HEADER] = {"backend": "shm", "namespace": namespace}
            result = actor_function(context=context, request=request)
            results.append({**result.arrays, "returns": np.array(result.header["episode_returns"]),
                            "lengths": np.array(result.header["episode_lengths"])})
    return results


def test_the_vector_backend_gives_the_per_env_loops_fragments_bit_for_bit() -> None:
    loop, vector = _fragments(backend="gymnasium"), _fragments(backend="vector")
    assert sum(len(f["returns"]) for f in loop) > 3   # episodes ended inside, across the fragment boundary too
    for loop_fragment, vector_fragment in zip(loop, vector, strict=True):
        assert loop_fragment.keys() == vector_fragment.keys()
        for key in loop_fragment:
            np.testing.assert_array_equal(vector_fragment[key], loop_fragment[key], err_msg=key)


@pytest.mark.skipif(not importlib.util.find_spec("envpool"), reason="the envpool extra is not installed here")
def test_the_envpool_backends_fragments_keep_the_row_bookkeeping() -> None:
    """Same columns, shapes and dtypes as the loop's; a row is never a reset step (return == length, every
    reward 1); an env's episode continues across fragments (a warm slot), and each ended episode cuts its row."""
    loop, pool = _fragments(backend="gymnasium"), _fragments(backend="envpool")
    for loop_fragment, pool_fragment in zip(loop, pool, strict=True):
        assert {k: (v.shape, v.dtype) for k, v in pool_fragment.items() if k not in ("returns", "lengths")} == \
            {k: (v.shape, v.dtype) for k, v in loop_fragment.items() if k not in ("returns", "lengths")}
        np.testing.assert_array_equal(pool_fragment["returns"], pool_fragment["lengths"])
        assert pool_fragment["rewards"].min() == 1.0
        assert pool_fragment["terminated"].sum() == len(pool_fragment["returns"])
    lengths = np.concatenate([f["lengths"] for f in pool])
    assert len(lengths) > 3 and lengths.sum() <= 2 * 3 * 40
    rows_ended = sum(int(f["terminated"].sum()) for f in pool)
    assert rows_ended == len(lengths)


def test_a_vector_slot_snapshot_resumes_on_a_cold_worker_bit_for_bit() -> None:
    """With snapshots (exact resume, actors.restore_slots) the vector backend's slot travels with the result; a cold
    worker given it produces the warm worker's next fragment exactly (episodes mid-way included)."""
    torch.set_num_threads(1)
    algo = PPO(config=PPOConfig())
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    model = algo.make_model(spaces=EnvSpaces(observation=env.observation_space, action=env.action_space))
    namespace = uuid.uuid4().hex[:8]

    def fragment(*, context: FunctionContext, seq: int, restore=None):
        request = ActorRequest(env_id="CartPole-v1", env_kwargs={}, num_envs=3, fragment_steps=30, seed=7,
                               actor_rank=0, slot_seq=seq, policy_version=0,
                               weights_key=weights_key(policy="main", version=0),
                               algo=algo.config.model_dump(mode="json"), env_backend="vector",
                               snapshot=True).to_message(restore=restore)
        request.header[STORE_HEADER] = {"backend": "shm", "namespace": namespace}
        result = actor_function(context=context, request=request)
        return pop_slot_state(header=result.header, arrays=result.arrays), result.arrays

    with ShmStore(namespace=namespace, owner=True) as store:
        store.put(key=weights_key(policy="main", version=0), message=model_to_message(model=model, version=0))
        warm = FunctionContext(worker_id="w0", function="actor", invocation_id="i0", attempt=1)
        state, _ = fragment(context=warm, seq=0)
        _, continued = fragment(context=warm, seq=1)
        cold = FunctionContext(worker_id="w1", function="actor", invocation_id="i1", attempt=1)
        _, resumed = fragment(context=cold, seq=1, restore=state)
        fresh = FunctionContext(worker_id="w2", function="actor", invocation_id="i2", attempt=1)
        _, restarted = fragment(context=fresh, seq=1)
    assert not np.array_equal(restarted["obs"], continued["obs"])   # without the snapshot the episodes differ
    for key in continued:
        np.testing.assert_array_equal(resumed[key], continued[key], err_msg=key)
