"""models/cnn_policy.py: PPO's CNN passes the user-network contract on stacked Atari frames and acts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.envs.spaces import EnvSpaces

FRAMES = EnvSpaces(observation=gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8), action=gym.spaces.Discrete(6))


def test_ppo_acts_and_evaluates_with_the_cnn() -> None:
    algo = PPO(config=PPOConfig(model="nimbus.models.cnn_policy:NatureCNNPolicyValue"))
    torch.manual_seed(0)
    model = algo.make_model(spaces=FRAMES)
    obs = torch.as_tensor(np.stack([FRAMES.observation.sample() for _ in range(3)]), dtype=torch.float32)
    out = algo.act(model=model, obs=obs, explore=True)
    assert out.actions.shape == (3,) and out.extras["values"].shape == (3,)
    log_prob, entropy, values = model.evaluate(obs, actions=torch.as_tensor(out.actions))
    np.testing.assert_allclose(log_prob.detach().numpy(), out.extras["log_prob"], rtol=1e-5, atol=1e-6)
    assert entropy.shape == (3,) and float(entropy.mean()) == pytest.approx(np.log(6), abs=0.05)  # std 0.01 head


def test_vector_observations_are_refused_by_name() -> None:
    algo = PPO(config=PPOConfig(model="nimbus.models.cnn_policy:NatureCNNPolicyValue"))
    vector = EnvSpaces(observation=gym.spaces.Box(-1, 1, (4,), dtype=np.float32), action=gym.spaces.Discrete(2))
    with pytest.raises(Exception, match="stacked frames"):
        algo.make_model(spaces=vector)
