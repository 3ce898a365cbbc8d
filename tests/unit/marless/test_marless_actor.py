"""The multi-agent actor function on mpe2 simple_spread (3 agents), called in-process on a real ShmStore."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nimbus.algos.multiagent import multiagent_algo_from_dict
from nimbus.algos.multiagent.config import IPPOConfig, MAPPOConfig
from nimbus.data.codec import decode, encode
from nimbus.envs.parallel import agent_spaces, make_parallel_env
from nimbus.envs.slot_state import pop_slot_state
from nimbus.marless.actor import MultiAgentActorRequest, marless_actor_function
from nimbus.models.weights import load_model
from tests.unit.marless.marless_harness import actor_request, ctx, put_version_zero

AGENTS = ["agent_0", "agent_1", "agent_2"]
OWN = {agent: f"p_{agent}" for agent in AGENTS}
IPPO = IPPOConfig(hidden_sizes=(16,), critic_hidden_sizes=(16,)).model_dump(mode="json")
MAPPO = MAPPOConfig(hidden_sizes=(16,), critic_hidden_sizes=(16,)).model_dump(mode="json")
VERSIONS = {policy: 0 for policy in OWN.values()}


def run(store, *, algo=IPPO, agent_policy=OWN, versions=VERSIONS, cache=None, **kwargs):
    request = actor_request(store=store, algo=algo, agent_policy=agent_policy, versions=versions, **kwargs)
    return marless_actor_function(context=ctx("marless_actor", cache=cache), request=request)


def test_request_round_trips_through_a_message() -> None:
    request = MultiAgentActorRequest(env_id="mpe2:simple_spread_v3", env_kwargs={"N": 3}, num_envs=2, fragment_steps=5,
                                     seed=1, actor_rank=3, slot_seq=4, agent_policy=OWN,
                                     weights_keys={"p_agent_0": "weights/p_agent_0/2"}, algo=IPPO, env_imports=("x",))
    message = request.to_message()
    assert message.header["_affinity"] == "actor-3"
    assert MultiAgentActorRequest.from_message(message) == request


def test_rows_are_env_major_per_agent_with_episode_ends(store) -> None:
    put_version_zero(store=store, algo=IPPO, env_id="mpe2:simple_spread_v3", env_kwargs={"N": 3, "max_cycles": 25},
                     agent_policy=OWN)
    envs, steps = 2, 30
    result = run(store, num_envs=envs, steps=steps)
    header, arrays = result.header, result.arrays
    rows = envs * steps
    assert header["env_steps"] == rows and header["agents"] == AGENTS and header["actor_rank"] == 0
    assert header["policy_versions"] == VERSIONS
    assert header["episode_lengths"] == [25, 25]
    assert "state" not in arrays  # IPPO is not centralised
    for agent in AGENTS:
        assert arrays[f"{agent}/obs"].shape == (rows, 18) and arrays[f"{agent}/obs"].dtype == np.float32
        assert arrays[f"{agent}/actions"].shape == (rows,) and arrays[f"{agent}/actions"].dtype == np.int64
        for name in ("logp", "rewards"):
            assert arrays[f"{agent}/{name}"].shape == (rows,) and arrays[f"{agent}/{name}"].dtype == np.float32
        truncated = arrays[f"{agent}/truncated"].reshape(envs, steps)
        cut = arrays[f"{agent}/cut"].reshape(envs, steps)
        assert truncated.sum() == 2 and truncated[:, 24].all()
        assert not arrays[f"{agent}/terminated"].any()
        assert cut[:, 24].all() and cut[:, -1].all() and cut.sum() == 4
        obs = arrays[f"{agent}/obs"].reshape(envs, steps, 18)
        next_obs = arrays[f"{agent}/next_obs"].reshape(envs, steps, 18)
        np.testing.assert_array_equal(next_obs[:, :24], obs[:, 1:25])    # within an episode
        np.testing.assert_array_equal(next_obs[:, 25:-1], obs[:, 26:])
        assert not np.array_equal(next_obs[:, 24], obs[:, 25])          # the final obs, not the reset one
        rewards = arrays[f"{agent}/rewards"].reshape(envs, steps)
        np.testing.assert_allclose(header["episode_returns"][agent], rewards[:, :25].sum(axis=1), rtol=1e-5)


def test_logp_is_of_the_policy_the_map_gives_each_agent(store) -> None:
    shared = dict.fromkeys(AGENTS, "p_agent_0")
    put_version_zero(store=store, algo=IPPO, env_id="mpe2:simple_spread_v3", env_kwargs={"N": 3, "max_cycles": 25},
                     agent_policy=OWN)
    result = run(store, agent_policy=shared, versions={"p_agent_0": 0})
    assert result.header["policy_versions"] == {"p_agent_0": 0}
    algo = multiagent_algo_from_dict(algo=IPPO)
    env = make_parallel_env(env_id="mpe2:simple_spread_v3", seed=0, kwargs={"N": 3})
    models = {}
    for policy in ("p_agent_0", "p_agent_1"):
        models[policy] = algo.make_policy(spaces=agent_spaces(env=env)["agent_0"])
        load_model(model=models[policy], message=store.get(key=f"weights/{policy}/0"))
    for agent in AGENTS:
        obs = torch.as_tensor(result.arrays[f"{agent}/obs"])
        actions = torch.as_tensor(result.arrays[f"{agent}/actions"])
        with torch.no_grad():
            shared_logp = models["p_agent_0"].evaluate(obs, actions=actions)[0].numpy()
            other_logp = models["p_agent_1"].evaluate(obs, actions=actions)[0].numpy()
        np.testing.assert_allclose(result.arrays[f"{agent}/logp"], shared_logp, rtol=1e-5, atol=1e-6)
        assert not np.allclose(result.arrays[f"{agent}/logp"], other_logp)


def test_centralised_algorithms_record_the_global_state(store) -> None:
    put_version_zero(store=store, algo=MAPPO, env_id="mpe2:simple_spread_v3", env_kwargs={"N": 3, "max_cycles": 25},
                     agent_policy=OWN)
    result = run(store, algo=MAPPO, num_envs=2, steps=30)
    state = result.arrays["state"].reshape(2, 30, 54)
    next_state = result.arrays["next_state"].reshape(2, 30, 54)
    np.testing.assert_array_equal(next_state[:, :24], state[:, 1:25])
    assert not np.array_equal(next_state[:, 24], state[:, 25])
    # simple_spread's state is the agents' observations concatenated
    np.testing.assert_array_equal(state[:, :, :18], result.arrays["agent_0/obs"].reshape(2, 30, 18))


def test_episodes_continue_across_rounds_and_a_mismatched_slot_starts_afresh(store) -> None:
    put_version_zero(store=store, algo=IPPO, env_id="mpe2:simple_spread_v3", env_kwargs={"N": 3, "max_cycles": 25},
                     agent_policy=OWN)
    cache: dict = {}
    first = run(store, cache=cache, steps=10, slot_seq=0)
    second = run(store, cache=cache, steps=10, slot_seq=1)
    last_next = first.arrays["agent_0/next_obs"].reshape(2, 10, 18)[:, -1]
    np.testing.assert_array_equal(second.arrays["agent_0/obs"].reshape(2, 10, 18)[:, 0], last_next)
    third = run(store, cache=cache, steps=10, slot_seq=1)  # the slot is at seq 2: rebuilt for seq 1, fresh envs
    assert not np.array_equal(third.arrays["agent_0/obs"].reshape(2, 10, 18)[:, 0], last_next)
    fresh = run(store, cache={}, steps=10, slot_seq=1)     # ... exactly as a cold worker would
    np.testing.assert_array_equal(third.arrays["agent_0/obs"], fresh.arrays["agent_0/obs"])
    np.testing.assert_array_equal(third.arrays["agent_0/actions"], fresh.arrays["agent_0/actions"])


def test_a_failed_fragment_drops_the_slot(store) -> None:
    put_version_zero(store=store, algo=IPPO, env_id="mpe2:simple_spread_v3", env_kwargs={"N": 3, "max_cycles": 25},
                     agent_policy=OWN)
    cache: dict = {}
    kwargs = {"env_id": "marless_harness:failing_spread", "env_kwargs": {"N": 3, "max_cycles": 25, "fail_step": 8},
              "num_envs": 1}
    run(store, cache=cache, steps=5, **kwargs)
    assert 0 in cache["marless_slots"]
    with pytest.raises(RuntimeError, match="injected failure"):
        run(store, cache=cache, steps=5, slot_seq=1, **kwargs)
    assert 0 not in cache["marless_slots"]


def test_an_agent_without_weights_is_named(store) -> None:
    put_version_zero(store=store, algo=IPPO, env_id="mpe2:simple_spread_v3", env_kwargs={"N": 3, "max_cycles": 25},
                     agent_policy=OWN)
    with pytest.raises(ValueError, match="agent 'agent_2'.*'p_unknown'"):
        run(store, agent_policy={**OWN, "agent_2": "p_unknown"})


@pytest.mark.parametrize("algo", [IPPO, MAPPO], ids=["ippo", "mappo"])
def test_a_worker_without_the_slot_goes_on_from_the_state_the_request_carries(store, algo) -> None:
    """actors.restore_slots: the slot a result carries, sent through the codec to a worker that never served the
    rank, continues the rank's episodes exactly as the warm worker does; without it the episodes start anew."""
    put_version_zero(store=store, algo=algo, env_id="mpe2:simple_spread_v3", env_kwargs={"N": 3, "max_cycles": 25},
                     agent_policy=OWN)
    warm_cache: dict = {}
    first = run(store, algo=algo, cache=warm_cache, slot_seq=0, steps=15, snapshot=True)   # 15 of 25 steps
    carried = decode(encode(first))
    state = pop_slot_state(header=carried.header, arrays=carried.arrays)
    assert state is not None and len(state.meta) == 2
    warm = run(store, algo=algo, cache=warm_cache, slot_seq=1, steps=20, snapshot=True)
    moved = run(store, algo=algo, cache={}, slot_seq=1, steps=20, snapshot=True, restore=state)
    assert warm.header["episode_lengths"] == moved.header["episode_lengths"] == [25, 25]
    assert warm.header["episode_returns"] == moved.header["episode_returns"]
    assert sorted(warm.arrays) == sorted(moved.arrays)
    for name, value in warm.arrays.items():
        np.testing.assert_array_equal(moved.arrays[name], value, err_msg=name)
    fresh = run(store, algo=algo, cache={}, slot_seq=1, steps=20)
    assert fresh.header["episode_lengths"] == []      # new episodes: none ends within 20 steps
