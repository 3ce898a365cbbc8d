from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.errors import ConfigError
from nimbus.models.mlp import ActorCritic

OBS = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-2.0, 2.0, shape=(2,), dtype=np.float32)


def test_discrete_shapes_and_explore_modes() -> None:
    torch.manual_seed(0)
    model = ActorCritic(observation_space=OBS, action_space=DISCRETE)
    obs = torch.randn(5, 4)
    action, log_prob, value = model.act(obs, explore=True)
    assert action.shape == (5,) and action.dtype == torch.int64
    assert log_prob.shape == (5,) and value.shape == (5,)
    greedy, _, _ = model.act(obs, explore=False)
    torch.testing.assert_close(greedy, model.distribution(obs).probs.argmax(-1))
    new_log_prob, entropy, new_value = model.evaluate(obs, actions=action)
    torch.testing.assert_close(new_log_prob, log_prob)
    torch.testing.assert_close(new_value, value)
    assert entropy.shape == (5,)


def test_continuous_gaussian_state_independent_log_std() -> None:
    torch.manual_seed(0)
    model = ActorCritic(observation_space=OBS, action_space=BOX, hidden_sizes=(32,), activation="relu")
    obs = torch.randn(6, 4)
    action, log_prob, value = model.act(obs, explore=True)
    assert action.shape == (6, 2) and action.dtype == torch.float32
    dist = model.distribution(obs)
    torch.testing.assert_close(dist.stddev, torch.ones(6, 2))  # log_std starts at 0
    torch.testing.assert_close(log_prob, dist.log_prob(action).sum(-1))
    mode, _, _ = model.act(obs, explore=False)
    torch.testing.assert_close(mode, dist.mean)
    _, entropy, _ = model.evaluate(obs, actions=action)
    torch.testing.assert_close(entropy, torch.full((6,), 2 * (0.5 + 0.5 * math.log(2 * math.pi))))


def test_orthogonal_init_gains() -> None:
    torch.manual_seed(0)
    model = ActorCritic(observation_space=OBS, action_space=DISCRETE, hidden_sizes=(64, 64))
    hidden = model.actor[0].weight  # (64, 4): orthogonal columns with gain sqrt(2)
    torch.testing.assert_close(hidden.T @ hidden, 2.0 * torch.eye(4), atol=1e-5, rtol=1e-5)
    policy_head, value_head = model.actor[-1].weight, model.critic[-1].weight
    torch.testing.assert_close(policy_head @ policy_head.T, 1e-4 * torch.eye(3), atol=1e-8, rtol=1e-4)
    torch.testing.assert_close(value_head @ value_head.T, torch.eye(1), atol=1e-5, rtol=1e-5)
    assert all(layer.bias.abs().sum() == 0 for layer in model.modules() if isinstance(layer, torch.nn.Linear))
    assert isinstance(model.actor[1], torch.nn.Tanh)


def test_separate_actor_and_critic() -> None:
    model = ActorCritic(observation_space=OBS, action_space=DISCRETE)
    actor_params = {id(p) for p in model.actor.parameters()}
    assert actor_params.isdisjoint(id(p) for p in model.critic.parameters())


def test_observations_are_flattened() -> None:
    space = gym.spaces.Box(0.0, 1.0, shape=(2, 3), dtype=np.float64)
    model = ActorCritic(observation_space=space, action_space=DISCRETE)
    assert model.value(torch.zeros(7, 2, 3, dtype=torch.float64)).shape == (7,)


@pytest.mark.parametrize(
    "obs_space, action_space",
    [(gym.spaces.Discrete(4), DISCRETE), (OBS, gym.spaces.MultiBinary(3))],
)
def test_unsupported_spaces_are_refused(obs_space: gym.Space, action_space: gym.Space) -> None:
    with pytest.raises(ConfigError, match="space"):
        ActorCritic(observation_space=obs_space, action_space=action_space)
