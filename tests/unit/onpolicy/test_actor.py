"""The on-policy actor function, called in-process (no runtime): what its rows promise the learner's GAE."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.data.store import ShmStore
from nimbus.data.stores import STORE_HEADER
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
