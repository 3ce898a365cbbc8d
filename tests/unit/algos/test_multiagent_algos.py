"""IPPO and MAPPO: configs and registration, the policy network and act(), critic inputs, version-0 messages."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from pydantic import TypeAdapter, ValidationError

from nimbus.algos.multiagent import (
    MULTIAGENT_ALGO_CONFIGS,
    critic_to_message,
    initial_messages,
    load_critic,
    make_multiagent_algo,
    multiagent_algo_from_dict,
)
from nimbus.algos.multiagent.config import IPPOConfig, MAPPOConfig
from nimbus.algos.multiagent.ppo import centralised_inputs
from nimbus.algos.registry import ALGO_CONFIGS, AlgoConfig, make_algorithm
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError
from nimbus.models.weights import load_model

DISCRETE = EnvSpaces(observation=gym.spaces.Box(-1, 1, (6,), np.float32), action=gym.spaces.Discrete(5))
BOX = EnvSpaces(observation=gym.spaces.Box(-1, 1, (6,), np.float32), action=gym.spaces.Box(-1, 1, (2,), np.float32))


def test_registration_and_roles() -> None:
    from nimbus.algos.multiagent.config import IQLConfig, QMIXConfig, VDNConfig
    assert MULTIAGENT_ALGO_CONFIGS == {"ippo": IPPOConfig, "mappo": MAPPOConfig, "iql": IQLConfig, "vdn": VDNConfig,
                                       "qmix": QMIXConfig}
    assert all(ALGO_CONFIGS[name] is config for name, config in MULTIAGENT_ALGO_CONFIGS.items())
    iql, vdn = multiagent_algo_from_dict(algo={"name": "iql"}), multiagent_algo_from_dict(algo={"name": "vdn"})
    assert (iql.roles, iql.on_policy) == (("policy",), False)
    assert (vdn.roles, vdn.on_policy) == (("postprocess", "policy"), False)
    assert isinstance(TypeAdapter(AlgoConfig).validate_python({"name": "mappo", "lr": 1e-3}), MAPPOConfig)
    ippo, mappo = make_multiagent_algo(config=IPPOConfig()), multiagent_algo_from_dict(algo={"name": "mappo"})
    assert (ippo.name, ippo.roles, ippo.centralised, ippo.on_policy) == ("ippo", ("critic", "policy"), False, True)
    assert (mappo.name, mappo.roles, mappo.centralised) == ("mappo", ("postprocess", "critic", "policy"), True)


def test_single_agent_workflows_refuse_them() -> None:
    for config in (IPPOConfig(), MAPPOConfig()):
        with pytest.raises(ConfigError, match="train.workflow: marless"):
            make_algorithm(config=config)


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValidationError):
        IPPOConfig(hidden_sizes=())
    with pytest.raises(ValidationError):
        MAPPOConfig(unknown=1)


@pytest.mark.parametrize("spaces", [DISCRETE, BOX])
def test_act_gives_actions_and_their_log_probs(spaces: EnvSpaces) -> None:
    algo = make_multiagent_algo(config=IPPOConfig(hidden_sizes=(16,)))
    torch.manual_seed(0)
    policy = algo.make_policy(spaces=spaces)
    obs = torch.randn(7, 6)
    out = algo.act(model=policy, obs=obs, explore=True)
    assert out.actions.shape == (7,) + spaces.action.shape and out.extras["logp"].shape == (7,)
    assert out.extras["logp"].dtype == np.float32
    log_prob, entropy = policy.evaluate(obs, actions=torch.as_tensor(out.actions))
    np.testing.assert_allclose(out.extras["logp"], log_prob.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert entropy.shape == (7,)
    greedy = algo.act(model=policy, obs=obs, explore=False).actions
    np.testing.assert_array_equal(greedy, algo.act(model=policy, obs=obs, explore=False).actions)


def test_critic_inputs() -> None:
    ippo, mappo = make_multiagent_algo(config=IPPOConfig()), make_multiagent_algo(config=MAPPOConfig())
    assert ippo.critic_input_dim(spaces=DISCRETE, state_dim=20, num_agents=3) == 6
    assert mappo.critic_input_dim(spaces=DISCRETE, state_dim=20, num_agents=3) == 23
    critic = mappo.make_critic(spaces=DISCRETE, state_dim=20, num_agents=3)
    assert critic(torch.zeros(4, 23)).shape == (4,)
    inputs = centralised_inputs(state=np.ones((3, 2), np.float32), agent_index=np.array([2, 0, 1]), num_agents=3)
    np.testing.assert_array_equal(inputs, [[1, 1, 0, 0, 1], [1, 1, 1, 0, 0], [1, 1, 0, 1, 0]])


def test_initial_messages_are_seeded_and_leave_the_global_rng_alone() -> None:
    algo = make_multiagent_algo(config=MAPPOConfig(hidden_sizes=(8,)))
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    first = initial_messages(algo=algo, spaces=DISCRETE, state_dim=10, num_agents=2, seed=5)
    assert torch.equal(torch.rand(1), expected_next)
    again = initial_messages(algo=algo, spaces=DISCRETE, state_dim=10, num_agents=2, seed=5)
    other = initial_messages(algo=algo, spaces=DISCRETE, state_dim=10, num_agents=2, seed=6)
    assert set(first) == {"weights", "critic"} and first["weights"].header["policy_version"] == 0
    for key in first["weights"].arrays:
        np.testing.assert_array_equal(first["weights"].arrays[key], again["weights"].arrays[key])
    assert not np.array_equal(first["weights"].arrays["param.actor.0.weight"],
                              other["weights"].arrays["param.actor.0.weight"])
    policy = algo.make_policy(spaces=DISCRETE)
    load_model(model=policy, message=first["weights"])
    np.testing.assert_array_equal(policy.actor[0].weight.detach().numpy(),
                                  first["weights"].arrays["param.actor.0.weight"])
    critic = algo.make_critic(spaces=DISCRETE, state_dim=10, num_agents=2)
    assert not load_critic(critic=critic, optimizer=algo.make_optimizer(model=critic, lr=1e-3), message=first["critic"])


def test_critic_message_round_trips_with_its_optimizer() -> None:
    algo = make_multiagent_algo(config=IPPOConfig(hidden_sizes=(8,)))
    critic = algo.make_critic(spaces=DISCRETE, state_dim=0, num_agents=1)
    optimizer = algo.make_optimizer(model=critic, lr=1e-2)
    critic(torch.randn(5, 6)).pow(2).mean().backward()
    optimizer.step()
    message = critic_to_message(critic=critic, optimizer=optimizer, version=3)
    fresh = algo.make_critic(spaces=DISCRETE, state_dim=0, num_agents=1)
    fresh_optimizer = algo.make_optimizer(model=fresh, lr=1e-2)
    assert load_critic(critic=fresh, optimizer=fresh_optimizer, message=message)
    for a, b in zip(critic.parameters(), fresh.parameters()):
        assert torch.equal(a, b)
    state_a, state_b = optimizer.state_dict()["state"], fresh_optimizer.state_dict()["state"]
    assert torch.equal(state_a[0]["exp_avg"], state_b[0]["exp_avg"]) and float(state_b[0]["step"]) == 1.0


def test_return_norm_merges_batches_into_the_statistics_of_their_union() -> None:
    from nimbus.algos.multiagent.networks import ReturnNorm
    generator = torch.Generator().manual_seed(0)
    parts = [torch.randn(n, generator=generator) * 7 - 20 for n in (5, 40, 13)]
    norm = ReturnNorm()
    x = torch.tensor([-3.0, 4.0])
    torch.testing.assert_close(norm.normalize(x), x)   # the identity before any update
    for part in parts:
        norm.update(part)
    union = torch.cat(parts).double()
    assert norm.count.item() == 58
    np.testing.assert_allclose(norm.mean.item(), union.mean().item(), rtol=1e-12)
    np.testing.assert_allclose(norm.var.item(), union.var(unbiased=False).item(), rtol=1e-10)
    torch.testing.assert_close(norm.denormalize(norm.normalize(union.float())), union.float(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(norm.normalize(union.float()).double().std(unbiased=False).item(), 1.0, rtol=1e-5)
