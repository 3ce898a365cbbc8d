"""Evaluate a policy (from the Store or a checkpoint) in the driver process.

Example::

    result = evaluate_checkpoint(path=run_dir, episodes=10)
    result.mean_return
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nimbus.algos.base import EnvSpaces
from nimbus.algos.registry import make_algorithm
from nimbus.config import NimbusConfig, parse_config
from nimbus.data.codec import Message
from nimbus.envs.make import make_env
from nimbus.models.distributions import clip_action
from nimbus.train.checkpoint import load_checkpoint
from nimbus.functions.obsnorm import normalize, rms_from_extras
from nimbus.functions.weights import load_model


@dataclass(frozen=True)
class EvalResult:
    mean_return: float
    std_return: float
    returns: list[float]
    policy_version: int


def evaluate_policy(*, config: NimbusConfig, weights: Message, episodes: int, seed: int,
                    explore: bool = True) -> EvalResult:
    """Run ``episodes`` full episodes with the policy in ``weights`` (stochastic unless explore=False)."""
    env = make_env(env_id=config.env.id, seed=seed, kwargs=config.env.kwargs)
    spaces = EnvSpaces(observation=env.observation_space, action=env.action_space)
    algo = make_algorithm(config=config.algo)
    model = algo.make_model(spaces=spaces)
    extras = load_model(model=model, message=weights)
    rms = rms_from_extras(extras=extras) if getattr(config.algo, "normalize_obs", False) else None
    torch.manual_seed(seed)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                out = algo.act(model=model, obs=torch.as_tensor(normalize(rms=rms, obs=obs[None]), dtype=torch.float32), explore=explore)
            action = clip_action(action=out.actions, space=spaces.action)[0]
            obs, reward, terminated, truncated, _ = env.step(action.item() if action.ndim == 0 else action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return EvalResult(mean_return=float(np.mean(returns)), std_return=float(np.std(returns)), returns=returns,
                      policy_version=int(weights.header.get("policy_version", -1)))


def evaluate_checkpoint(*, path: Path, episodes: int, seed: int = 12345, explore: bool = True) -> EvalResult:
    """Load the newest verified checkpoint under ``path`` (a run dir, checkpoints dir, or ckpt dir)."""
    state = load_checkpoint(path=path)
    config = parse_config(data=state.config)
    return evaluate_policy(config=config, weights=state.weights, episodes=episodes, seed=seed, explore=explore)
