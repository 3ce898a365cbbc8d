"""Greedy evaluation of one policy plays up to NUM_ENVS episodes at once (roles/evaluate.py ``_greedy_together``) and
returns, episode by episode, what one-at-a-time play returns: `reference` below is the loop as it was before (one
env, episode k reset with seed + k). DQN on CartPole (arg-max actions) must match exactly; SAC on Pendulum (its squashed
mean) to rounding: a forward over many rows sums in another order than a one-row forward. Episode
lengths differ by seed (CartPole), so envs take the next episode in a shifting order; 3 envs and 16 are tried."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nimbus.algos.registry import make_algorithm
from nimbus.config import NimbusConfig, apply_overrides, load_config, parse_config
from nimbus.envs.make import make_env
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import model_to_message
from nimbus.roles import evaluate as roles_evaluate
from nimbus.roles.evaluate import evaluate_policy, load_policy

REPO = Path(__file__).resolve().parents[3]


def _config(name: str, *overrides: str) -> NimbusConfig:
    data = load_config(path=REPO / "configs" / f"{name}.yaml").model_dump(mode="json")
    return parse_config(data=apply_overrides(data=data, overrides=list(overrides)))


def reference(*, config: NimbusConfig, weights, episodes: int, seed: int) -> list[float]:
    """Greedy evaluation as roles/evaluate.py played it before: one env, one episode after another."""
    env = make_env(env_id=config.env.id, seed=seed, kwargs=dict(config.env.kwargs), imports=config.env.imports,
                   wrappers=config.env.wrappers)
    policy = load_policy(config=config, weights=weights,
                         spaces=EnvSpaces(observation=env.observation_space, action=env.action_space))
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            action = policy.actions(obs=obs[None], explore=False)[0]
            obs, reward, terminated, truncated, _ = env.step(action.item() if action.ndim == 0 else action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


@pytest.mark.parametrize(("name", "overrides", "exact"), [
    ("dqn-cartpole", ["algo.hidden_sizes=[64, 64]"], True),
    ("sac-pendulum", ["algo.hidden_sizes=[64, 64]"], False),
])
def test_greedy_episodes_played_together_return_what_one_at_a_time_play_returns(
        name: str, overrides: list[str], exact: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(name, *overrides)
    env = make_env(env_id=config.env.id, seed=0, kwargs=dict(config.env.kwargs), imports=config.env.imports,
                   wrappers=config.env.wrappers)
    spaces = EnvSpaces(observation=env.observation_space, action=env.action_space)
    torch.manual_seed(5)
    weights = model_to_message(model=make_algorithm(config=config.algo).make_model(spaces=spaces), version=7)
    expected = reference(config=config, weights=weights, episodes=10, seed=50_000)
    assert len(set(expected)) > 1, expected                     # the episodes differ: a wrong seed would show
    for num_envs in (3, 16):
        monkeypatch.setattr(roles_evaluate, "NUM_ENVS", num_envs)
        result = evaluate_policy(config=config, weights=weights, episodes=10, seed=50_000, explore=False)
        assert result.returns == (expected if exact else pytest.approx(expected, rel=1e-5)), num_envs
        assert result.policy_version == 7
