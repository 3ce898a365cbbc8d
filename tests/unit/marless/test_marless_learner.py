"""The multi-agent learner functions (postprocess, critic, policy), in-process on a real ShmStore, and one
function-level learning check: IPPO on simple_spread (3 agents) beats the uniform-random floor."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nimbus.algos.gae import compute_gae
from nimbus.algos.multiagent import load_critic, multiagent_algo_from_dict
from nimbus.algos.multiagent.config import IPPOConfig, MAPPOConfig
from nimbus.envs.parallel import agent_spaces, make_parallel_env
from nimbus.marless.actor import marless_actor_function
from nimbus.marless.learner import MarlessLearnerRequest, critic_function, policy_function, postprocess_function
from nimbus.models.weights import load_model
from tests.unit.marless.marless_harness import (
    ROLE_FUNCTIONS,
    SPREAD,
    actor_request,
    assemble_batch,
    ctx,
    learner_request,
    put_version_zero,
)

AGENTS = ["agent_0", "agent_1", "agent_2"]
OWN = {agent: f"p_{agent}" for agent in AGENTS}
SMALL = {"hidden_sizes": (16,), "critic_hidden_sizes": (16,), "num_epochs": 2, "num_minibatches": 2}
IPPO = IPPOConfig(**SMALL).model_dump(mode="json")
MAPPO = MAPPOConfig(**SMALL).model_dump(mode="json")
RANDOM_FLOOR = -27.6   # uniform-random per-agent episode return, simple_spread N=3, max_cycles 25 (issue 13)


def round_zero(store, *, algo, agent_policy=OWN, policy="p_agent_0", steps=30):
    """Version 0 of every policy, one actor fragment, and ``policy``'s batch/…/r0 from the agents mapped to it."""
    put_version_zero(store=store, algo=algo, env_id=SPREAD, env_kwargs={"N": 3, "max_cycles": 25},
                     agent_policy=agent_policy)
    versions = {p: 0 for p in set(agent_policy.values())}
    result = marless_actor_function(context=ctx("marless_actor"), request=actor_request(
        store=store, algo=algo, agent_policy=agent_policy, versions=versions, num_envs=2, steps=steps))
    agents = [a for a in AGENTS if agent_policy[a] == policy]
    batch = assemble_batch(results=[result], agents=agents, all_agents=AGENTS,
                           centralised=multiagent_algo_from_dict(algo=algo).centralised)
    store.put(key=f"batch/{policy}/r0", message=batch)
    return {a: AGENTS.index(a) for a in agents}, batch


def request(store, *, algo, agents, policy="p_agent_0", round_=0, probe=False):
    return learner_request(store=store, algo=algo, policy=policy, round_=round_, agents=agents, all_agents=AGENTS,
                           weights_version=0, critic_version=0, probe=probe)


def writable(arrays):
    """Copies of a Store value's (read-only) arrays."""
    return {name: np.array(value) for name, value in arrays.items()}


def critic_net(store, *, algo, key):
    marless = multiagent_algo_from_dict(algo=algo)
    spaces = agent_spaces(env=make_parallel_env(env_id=SPREAD, seed=0, kwargs={"N": 3}))["agent_0"]
    critic = marless.make_critic(spaces=spaces, state_dim=54, num_agents=3)
    load_critic(critic=critic, optimizer=marless.make_optimizer(model=critic, lr=1e-3), message=store.get(key=key))
    return critic


def test_request_round_trips_through_a_message() -> None:
    req = MarlessLearnerRequest(env_id=SPREAD, env_kwargs={}, algo=IPPO, policy="p_agent_1", round=4,
                             agents={"agent_1": 1}, all_agents=AGENTS, batch_key="batch/p_agent_1/r4",
                             weights_version=3, critic_version=3, seed=0, probe=True)
    message = req.to_message()
    assert MarlessLearnerRequest.from_message(message) == req and message.header["_affinity"] == "learner-p_agent_1"
    assert req.key(prefix="adv") == "adv/p_agent_1/r4"


def test_postprocess_builds_state_and_one_hot_agent(store) -> None:
    shared = dict.fromkeys(AGENTS, "p_agent_0")
    agents, batch = round_zero(store, algo=MAPPO, agent_policy=shared)
    result = postprocess_function(context=ctx("postprocess"), request=request(store, algo=MAPPO, agents=agents))
    post = store.get(key=result.header["post_key"]).arrays
    rows = 3 * 2 * 30
    assert post["critic_obs"].shape == (rows, 57) and post["next_critic_obs"].shape == (rows, 57)
    np.testing.assert_array_equal(post["critic_obs"][:, :54], batch.arrays["state"])
    np.testing.assert_array_equal(post["next_critic_obs"][:, :54], batch.arrays["next_state"])
    one_hot = post["critic_obs"][:, 54:]
    np.testing.assert_array_equal(one_hot.argmax(axis=1), np.repeat([0, 1, 2], 60))
    assert (one_hot.sum(axis=1) == 1).all()


@pytest.mark.parametrize("algo", [IPPO, MAPPO])
def test_critic_gae_per_agent_segment_then_fit(store, algo) -> None:
    shared = dict.fromkeys(AGENTS, "p_agent_0")
    agents, batch = round_zero(store, algo=algo, agent_policy=shared)
    req = request(store, algo=algo, agents=agents)
    if algo["name"] == "mappo":
        postprocess_function(context=ctx("postprocess"), request=req)
        post = writable(store.get(key="post/p_agent_0/r0").arrays)
        inputs, next_inputs = post["critic_obs"], post["next_critic_obs"]
    else:
        inputs, next_inputs = batch.arrays["obs"], batch.arrays["next_obs"]
    result = critic_function(context=ctx("critic"), request=req)
    assert result.header["critic_version"] == 1 and math.isfinite(result.header["value_loss"])
    adv = writable(store.get(key="adv/p_agent_0/r0").arrays)
    # by hand, agent by agent: each agent's rows are their own segments (its last row is cut)
    v0 = critic_net(store, algo=algo, key="critic/p_agent_0/0")
    arrays = batch.arrays
    for i in range(3):
        rows = slice(60 * i, 60 * (i + 1))
        with torch.no_grad():
            values = v0(torch.as_tensor(inputs[rows]))
            next_values = v0(torch.as_tensor(next_inputs[rows]))
        expected, returns = compute_gae(rewards=torch.as_tensor(arrays["rewards"][rows]), values=values,
                                        next_values=next_values, terminated=torch.as_tensor(arrays["terminated"][rows]),
                                        cut=torch.as_tensor(arrays["cut"][rows]), gamma=0.99, gae_lambda=0.95)
        np.testing.assert_allclose(adv["advantages"][rows], expected.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(adv["returns"][rows], returns.numpy(), rtol=1e-5, atol=1e-5)
    # the fit moved the critic towards the returns
    v1 = critic_net(store, algo=algo, key="critic/p_agent_0/1")
    with torch.no_grad():
        target = torch.as_tensor(np.array(adv["returns"]))
        before = ((v0.values(torch.as_tensor(inputs)) - target) ** 2).mean()
        after = ((v1.values(torch.as_tensor(inputs)) - target) ** 2).mean()
    assert after < before
    assert "optim" in store.get(key="critic/p_agent_0/1").header
    # ValueNorm: version 1's statistics are those of the returns it was fitted to
    assert v1.return_norm.count.item() == len(target)
    np.testing.assert_allclose(v1.return_norm.mean.item(), target.double().mean().item(), rtol=1e-6)
    np.testing.assert_allclose(v1.return_norm.var.item(), target.double().var(unbiased=False).item(), rtol=1e-5)


def test_without_value_norm_the_critic_fits_raw_returns(store) -> None:
    algo = IPPOConfig(**SMALL, value_norm=False).model_dump(mode="json")
    agents, _ = round_zero(store, algo=algo)
    critic_function(context=ctx("critic"), request=request(store, algo=algo, agents=agents))
    v1 = critic_net(store, algo=algo, key="critic/p_agent_0/1")
    assert v1.return_norm.count.item() == 0 and v1.return_norm.mean.item() == 0.0
    inputs = torch.as_tensor(store.get(key="batch/p_agent_0/r0").arrays["obs"])
    with torch.no_grad():
        torch.testing.assert_close(v1.values(inputs), v1(inputs))


def test_truncation_bootstraps_from_the_final_observation(store) -> None:
    agents, batch = round_zero(store, algo=IPPO, steps=30)
    critic_function(context=ctx("critic"), request=request(store, algo=IPPO, agents=agents))
    adv = writable(store.get(key="adv/p_agent_0/r0").arrays)
    v0 = critic_net(store, algo=IPPO, key="critic/p_agent_0/0")
    arrays = batch.arrays
    row = 24  # env 0, the episode's last step (truncated at max_cycles 25)
    assert arrays["truncated"][row] and not arrays["terminated"][row]
    with torch.no_grad():
        value = v0(torch.as_tensor(arrays["obs"][row:row + 1]))[0].item()
        final = v0(torch.as_tensor(arrays["next_obs"][row:row + 1]))[0].item()
    np.testing.assert_allclose(adv["advantages"][row], arrays["rewards"][row] + 0.99 * final - value, rtol=1e-4)


def test_policy_update_publishes_v1_and_favours_positive_advantages(store) -> None:
    agents, batch = round_zero(store, algo=IPPO)
    req = request(store, algo=IPPO, agents=agents)
    critic_function(context=ctx("critic"), request=req)
    invocation = "inv-policy-0"
    result = policy_function(context=ctx("policy", invocation=invocation), request=req)
    header = result.header
    assert header["policy_version"] == 1 and math.isnan(header["convexity"]) and header["extras"] == {}
    for key in ("policy_loss", "entropy", "approx_kl", "clip_fraction", "policy_s"):
        assert math.isfinite(header[key]), key
    assert store.get(key="optim/p_agent_0/1").header["policy_version"] == 1
    marless = multiagent_algo_from_dict(algo=IPPO)
    spaces = agent_spaces(env=make_parallel_env(env_id=SPREAD, seed=0, kwargs={"N": 3}))["agent_0"]
    old, new = marless.make_policy(spaces=spaces), marless.make_policy(spaces=spaces)
    load_model(model=old, message=store.get(key="weights/p_agent_0/0"))
    load_model(model=new, message=store.get(key="weights/p_agent_0/1"))
    obs, actions = torch.as_tensor(batch.arrays["obs"]), torch.as_tensor(batch.arrays["actions"])
    advantages = torch.as_tensor(writable(store.get(key="adv/p_agent_0/r0").arrays)["advantages"])
    with torch.no_grad():
        change = new.evaluate(obs, actions=actions)[0] - old.evaluate(obs, actions=actions)[0]
    assert (change * (advantages - advantages.mean())).sum() > 0  # the surrogate went up
    # a retry of the same invocation may redo its puts (idempotent)
    again = policy_function(context=ctx("policy", invocation=invocation), request=req)
    assert again.header["policy_version"] == 1


def test_the_probe_reports_the_convexity(store) -> None:
    agents, _ = round_zero(store, algo=IPPO)
    critic_function(context=ctx("critic"), request=request(store, algo=IPPO, agents=agents))
    probe = {"subset_size": 32, "max_iterations": 20, "tolerance": 1e-3}
    header = policy_function(context=ctx("policy"), request=request(store, algo=IPPO, agents=agents,
                                                                      probe=probe)).header
    extras = header["extras"]
    assert extras["hessian_lambda_max"] > 0 > extras["hessian_lambda_min"]
    assert header["convexity"] == pytest.approx(-extras["hessian_lambda_max"] / extras["hessian_lambda_min"])
    assert extras["probe_rows"] == 32


def run_training(store, *, algo: dict, rounds: int, num_envs: int, steps: int) -> list[float]:
    """actor → (postprocess) → critic → policy per agent's own policy, ``rounds`` times; the mean per-agent return of
    the episodes each round finished."""
    put_version_zero(store=store, algo=algo, env_id=SPREAD, env_kwargs={"N": 3, "max_cycles": 25}, agent_policy=OWN)
    marless = multiagent_algo_from_dict(algo=algo)
    versions = {policy: 0 for policy in OWN.values()}
    actor_cache: dict = {}
    learner_cache: dict = {}
    history = []
    for k in range(rounds):
        result = marless_actor_function(context=ctx("marless_actor", cache=actor_cache), request=actor_request(
            store=store, algo=algo, agent_policy=OWN, versions=versions, slot_seq=k, num_envs=num_envs, steps=steps))
        returns = result.header["episode_returns"]
        if returns["agent_0"]:
            history.append(float(np.mean([np.mean(returns[a]) for a in AGENTS])))
        for agent in AGENTS:
            policy = OWN[agent]
            store.put(key=f"batch/{policy}/r{k}", message=assemble_batch(results=[result], agents=[agent],
                                                                         all_agents=AGENTS,
                                                                         centralised=marless.centralised))
            req = learner_request(store=store, algo=algo, policy=policy, round_=k, agents={agent: AGENTS.index(agent)},
                                  all_agents=AGENTS, weights_version=versions[policy],
                                  critic_version=versions[policy])
            for role in marless.roles:
                ROLE_FUNCTIONS[role](context=ctx(role, cache=learner_cache), request=req)
            versions[policy] += 1
    return history
