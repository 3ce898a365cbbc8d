"""IQL and VDN as MultiAgentAlgorithms: configs, the Q policy, ε-greedy act, version-0 messages."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from pydantic import ValidationError

from nimbus.algos.multiagent.config import IQLConfig, VDNConfig
from nimbus.algos.multiagent.iql import IQL, initial_messages
from nimbus.algos.multiagent.vdn import VDN
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError
from nimbus.models.weights import load_model

SPACES = EnvSpaces(observation=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), action=gym.spaces.Discrete(3))


def test_configs_are_named_frozen_and_validated() -> None:
    assert IQLConfig().name == "iql" and VDNConfig().name == "vdn"
    assert VDNConfig.model_validate({"name": "vdn", "lr": 1e-3}).lr == 1e-3
    with pytest.raises(ValidationError):
        IQLConfig(batch_size=100, replay_capacity=50)
    with pytest.raises(ValidationError):
        IQLConfig.model_validate({"name": "vdn"})
    with pytest.raises(ValidationError):
        VDNConfig(hidden_sizes=())
    with pytest.raises(ValidationError):
        IQLConfig().lr = 1.0  # type: ignore[misc]


def test_protocol_attributes() -> None:
    iql, vdn = IQL(config=IQLConfig()), VDN(config=VDNConfig())
    assert (iql.name, iql.roles, iql.on_policy, iql.centralised) == ("iql", ("policy",), False, False)
    assert (vdn.name, vdn.roles, vdn.on_policy, vdn.centralised) == ("vdn", ("postprocess", "policy"), False, False)


def test_make_policy_refuses_continuous_actions() -> None:
    spaces = EnvSpaces(observation=SPACES.observation, action=gym.spaces.Box(-1, 1, (2,), np.float32))
    with pytest.raises(ConfigError, match="Discrete"):
        IQL(config=IQLConfig()).make_policy(spaces=spaces)


def test_act_is_greedy_without_exploration_and_uniform_at_epsilon_one() -> None:
    torch.manual_seed(0)
    algo = IQL(config=IQLConfig(hidden_sizes=(8,)))
    model = algo.make_policy(spaces=SPACES)
    obs = torch.randn(3000, 4)
    greedy = model.q(obs).argmax(dim=1).numpy()
    assert float(model.epsilon) == 1.0
    assert np.array_equal(algo.act(model=model, obs=obs, explore=False).actions, greedy)
    explored = algo.act(model=model, obs=obs, explore=True).actions
    assert explored.dtype == np.int64
    assert np.allclose(np.bincount(explored, minlength=3) / 3000, 1 / 3, atol=0.04)   # ε = 1: uniform
    model.epsilon.fill_(0.0)
    assert np.array_equal(algo.act(model=model, obs=obs, explore=True).actions, greedy)
    model.epsilon.fill_(0.3)
    changed = (algo.act(model=model, obs=obs, explore=True).actions != greedy).mean()
    assert 0.15 < changed < 0.25      # ε · (1 − 1/3) = 0.2 of the actions differ from the greedy ones


def test_epsilon_schedule() -> None:
    algo = VDN(config=VDNConfig(exploration_initial_eps=1.0, exploration_final_eps=0.1, exploration_fraction=0.5))
    assert algo.epsilon_at(progress=0.0) == 1.0
    assert algo.epsilon_at(progress=0.25) == pytest.approx(0.55)
    assert algo.epsilon_at(progress=0.9) == pytest.approx(0.1)


def test_initial_messages_load_into_a_fresh_policy() -> None:
    algo = VDN(config=VDNConfig(hidden_sizes=(8,)))
    first = initial_messages(algo=algo, spaces=SPACES, state_dim=10, num_agents=2, seed=1)
    again = initial_messages(algo=algo, spaces=SPACES, state_dim=10, num_agents=2, seed=1)
    assert set(first) == {"weights"}
    assert first["weights"].header["policy_version"] == 0 and first["weights"].header["grad_steps"] == 0
    model = algo.make_policy(spaces=SPACES)
    load_model(model=model, message=first["weights"])
    assert all(np.array_equal(first["weights"].arrays[k], again["weights"].arrays[k]) for k in first["weights"].arrays)
    assert float(model.epsilon) == 1.0


def test_initial_messages_leave_the_callers_rng_alone() -> None:
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    initial_messages(algo=IQL(config=IQLConfig(hidden_sizes=(8,))), spaces=SPACES, state_dim=0, num_agents=2, seed=9)
    assert torch.equal(torch.rand(2), expected)
