from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch.distributions import Categorical, Normal

from nimbus.models.distributions import clip_action, entropy, log_prob, mode


def test_gaussian_log_prob_and_entropy_sum_over_action_dims() -> None:
    dist = Normal(torch.zeros(2, 3), torch.ones(2, 3))
    actions = torch.zeros(2, 3)
    torch.testing.assert_close(log_prob(dist=dist, actions=actions), torch.full((2,), -1.5 * np.log(2 * np.pi)))
    torch.testing.assert_close(entropy(dist=dist), dist.entropy().sum(-1))
    torch.testing.assert_close(mode(dist=dist), torch.zeros(2, 3))


def test_categorical_log_prob_entropy_mode() -> None:
    dist = Categorical(probs=torch.tensor([[0.25, 0.75], [0.5, 0.5]]))
    torch.testing.assert_close(log_prob(dist=dist, actions=torch.tensor([1, 0])), torch.log(torch.tensor([0.75, 0.5])))
    assert entropy(dist=dist).shape == (2,)
    torch.testing.assert_close(mode(dist=dist)[:1], torch.tensor([1]))


def test_clip_action_box_and_passthrough() -> None:
    box = gym.spaces.Box(low=np.array([-1.0, 0.0]), high=np.array([1.0, 2.0]), dtype=np.float32)
    clipped = clip_action(action=np.array([[-3.0, 1.0], [0.5, 9.0]]), space=box)
    np.testing.assert_array_equal(clipped, [[-1.0, 1.0], [0.5, 2.0]])
    assert clipped.dtype == np.float32
    discrete = np.array([1, 0])
    assert clip_action(action=discrete, space=gym.spaces.Discrete(2)) is discrete
