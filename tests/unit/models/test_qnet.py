"""Q-networks, the Atari CNN torso, SAC's squashed Gaussian actor and twin critics, Polyak updates."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from nimbus.errors import ConfigError
from nimbus.models.mlp import ActorCritic
from nimbus.models.qnet import (
    CNNActorCritic,
    FlattenMLP,
    NatureCNN,
    QNetwork,
    SquashedGaussianActor,
    TwinQ,
    make_actor_critic,
    make_torso,
    polyak_update,
    squashed_gaussian_log_prob,
)


@pytest.mark.parametrize("shape", [(84, 84, 4), (4, 84, 84)], ids=["channels_last", "channels_first"])
def test_cnn_torso_takes_uint8_frame_stacks(shape):
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    torso, features = make_torso(observation_space=space, hidden_sizes=(64,))
    assert isinstance(torso, NatureCNN) and features == 512
    q = QNetwork(observation_space=space, num_actions=6, hidden_sizes=(64,))
    obs = torch.randint(0, 256, (2, *shape), dtype=torch.uint8)
    assert q(obs).shape == (2, 6) and q(obs).dtype == torch.float32


def test_vector_observations_use_a_flattening_mlp():
    space = gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)
    torso, features = make_torso(observation_space=space, hidden_sizes=(32, 16))
    assert isinstance(torso, FlattenMLP) and features == 16
    assert QNetwork(observation_space=space, num_actions=4, hidden_sizes=(32,))(torch.zeros(5, 2, 3)).shape == (5, 4)


def test_squashed_gaussian_log_prob_matches_torch_tanh_transform():
    torch.manual_seed(0)
    # float64: the reference inverts tanh (atanh), which loses digits in float32 where tanh saturates
    mean, log_std = torch.randn(64, 3, dtype=torch.float64), torch.randn(64, 3, dtype=torch.float64).clamp(-2, 1)
    u = mean + log_std.exp() * torch.randn(64, 3, dtype=torch.float64)
    ref = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform()]).log_prob(torch.tanh(u)).sum(-1)
    mine = squashed_gaussian_log_prob(u=u, mean=mean, log_std=log_std)
    torch.testing.assert_close(mine, ref, rtol=1e-8, atol=1e-8)
    # stays finite where tanh saturates (|u| large), where the naive log(1 - tanh²) gives -inf
    big = squashed_gaussian_log_prob(u=torch.tensor([[30.0]]), mean=torch.tensor([[30.0]]), log_std=torch.zeros(1, 1))
    assert torch.isfinite(big).all()


def test_actor_samples_in_unit_box_and_deterministic_is_tanh_mean():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(obs_dim=3, action_dim=2, hidden_sizes=(16,))
    obs = torch.randn(100, 3)
    a, logp = actor.sample(obs)
    assert a.shape == (100, 2) and logp.shape == (100,) and a.abs().max() < 1
    mean, _ = actor(obs)
    torch.testing.assert_close(actor.sample(obs, deterministic=True)[0], torch.tanh(mean))
    a.sum().backward()  # reparameterised: gradients reach the actor
    assert actor.mean.weight.grad is not None


def test_twin_critics_are_independent_and_polyak_update():
    twin = TwinQ(obs_dim=3, action_dim=2, hidden_sizes=(8,))
    q1, q2 = twin(torch.zeros(4, 3), torch.zeros(4, 2))
    assert q1.shape == (4,) and not torch.equal(twin.q1.net[0].weight, twin.q2.net[0].weight)
    target = TwinQ(obs_dim=3, action_dim=2, hidden_sizes=(8,))
    old = target.q1.net[0].weight.clone()
    polyak_update(source=twin, target=target, tau=0.25)
    torch.testing.assert_close(target.q1.net[0].weight, 0.25 * twin.q1.net[0].weight + 0.75 * old)
    polyak_update(source=twin, target=target, tau=1.0)
    assert torch.equal(target.q2.net[0].weight, twin.q2.net[0].weight)


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(6), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)],
                         ids=["discrete", "box"])
def test_cnn_actor_critic_has_the_actor_critic_interface(action_space):
    obs_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    model = make_actor_critic(observation_space=obs_space, action_space=action_space, hidden_sizes=(64,),
                              activation="tanh")
    assert isinstance(model, CNNActorCritic)
    obs = torch.randint(0, 256, (3, 84, 84, 4), dtype=torch.uint8)
    action, log_prob, value = model.act(obs, explore=True)
    assert action.shape == (3, *action_space.shape) and log_prob.shape == (3,) and value.shape == (3,)
    new_log_prob, entropy, _ = model.evaluate(obs.float(), actions=action)  # float input in 0..255 works too
    torch.testing.assert_close(new_log_prob, log_prob)
    assert entropy.shape == (3,)
    vector = make_actor_critic(observation_space=gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
                               action_space=action_space, hidden_sizes=(8,), activation="relu")
    assert isinstance(vector, ActorCritic)
    with pytest.raises(ConfigError):
        CNNActorCritic(observation_space=gym.spaces.Box(-1.0, 1.0, (4,), np.float32), action_space=action_space)
