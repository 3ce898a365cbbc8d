"""algo.model: a user's torch module for PPO and DQN, its contract checked with a message that says what fits."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from nimbus.algos.dqn.algorithm import DQN
from nimbus.algos.dqn.config import DQNConfig
from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError

CARTPOLE = EnvSpaces(observation=gym.spaces.Box(-1, 1, (4,)), action=gym.spaces.Discrete(2))
PENDULUM = EnvSpaces(observation=gym.spaces.Box(-1, 1, (3,)), action=gym.spaces.Box(-2, 2, (1,)))


@pytest.fixture(autouse=True)
def _nets(user_nets) -> None:
    """Every test here refers to tests/conftest.py's module ``usernets``."""


def test_ppo_custom_discrete_model_acts_and_evaluates_with_one_forward_pass() -> None:
    model = PPO(config=PPOConfig(model="usernets:Policy", model_kwargs={"width": 16})).make_model(spaces=CARTPOLE)
    assert sorted(model.state_dict()) == ["net.body.0.bias", "net.body.0.weight", "net.pi.bias", "net.pi.weight",
                                          "net.v.bias", "net.v.weight"]
    obs = torch.randn(5, 4)
    action, log_prob, value = model.act(obs, explore=False)
    logits, v = model.net(obs)
    assert torch.equal(action, logits.argmax(-1)) and torch.allclose(value, v.squeeze(-1))
    assert torch.allclose(log_prob, torch.log_softmax(logits, -1).gather(1, action[:, None]).squeeze(1))
    new_log_prob, entropy, _ = model.evaluate(obs, actions=action)
    assert torch.allclose(new_log_prob, log_prob) and entropy.shape == (5,)


def test_ppo_custom_continuous_model_gets_a_learned_log_std() -> None:
    model = PPO(config=PPOConfig(model="usernets:Policy")).make_model(spaces=PENDULUM)
    assert "actor_logstd" in dict(model.named_parameters())
    obs = torch.randn(3, 3)
    action, _, _ = model.act(obs, explore=False)
    assert action.shape == (3, 1) and torch.equal(action, model.net(obs)[0])   # the mode is the network's mean


def test_dqn_custom_q_network_and_its_target_copy() -> None:
    model = DQN(config=DQNConfig(model="usernets:QNet")).make_model(spaces=CARTPOLE)
    assert sorted(model.state_dict()) == ["epsilon", "num_grad_steps", *(f"{net}.net.{layer}.{kind}" for net in
                                          ("q", "q_target") for layer in (0, 2) for kind in ("bias", "weight"))]
    out = DQN(config=DQNConfig(model="usernets:QNet")).act(model=model, obs=torch.randn(4, 4), explore=False)
    assert out.actions.shape == (4,)


@pytest.mark.parametrize(("algo", "ref", "pattern"), [
    ("ppo", "usernets:WrongWidth", r"policy_out \(logits\) must have shape \(B, 2\) = \(2, 2\).*got a tensor of "
                                   r"shape \(2, 32\)"),
    ("ppo", "usernets:OneOutput", r"forward\(obs\) must return \(policy_out, value\) for PPO, got a tensor"),
    ("ppo", "usernets:Positional", r"constructor must accept keyword arguments observation_space, action_space"),
    ("ppo", "usernets:Nope", r"algo\.model: module 'usernets' has no attribute 'Nope'"),
    ("dqn", "usernets:Policy", r"q_values must have shape \(B, 2\) = \(2, 2\) .*got a tuple of 2"),
])
def test_a_model_that_does_not_fit_is_refused_with_what_does_not_fit(algo: str, ref: str, pattern: str) -> None:
    algorithm = PPO(config=PPOConfig(model=ref)) if algo == "ppo" else DQN(config=DQNConfig(model=ref))
    with pytest.raises(ConfigError, match=pattern):
        algorithm.make_model(spaces=CARTPOLE)
