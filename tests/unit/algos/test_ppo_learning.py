"""PPO's math learns, single process, before any distributed part is wired in.

A tiny in-test actor loop (CleanRL-style, 4 envs × 128 steps per update) through the same pieces the
distributed actor and learner use: make_env, PPO.make_model / act / postprocess, ppo_update.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.algos.ppo.learner import UpdateStats, ppo_update
from nimbus.envs.make import make_env
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.distributions import clip_action

logger = logging.getLogger(__name__)


@dataclass
class Actor:
    """Several envs stepped in lockstep; writes buffer_spec columns as (time, env) arrays."""

    envs: list[gym.Env]
    obs: np.ndarray = field(init=False)
    episode_returns: np.ndarray = field(init=False)
    finished_returns: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.obs = np.stack([env.reset()[0] for env in self.envs])
        self.episode_returns = np.zeros(len(self.envs))

    def rollout(self, *, algo: PPO, model: torch.nn.Module, num_steps: int) -> dict[str, torch.Tensor]:
        columns: dict[str, list[np.ndarray]] = {key: [] for key in algo.buffer_spec(spaces=spaces_of(self.envs[0]))}
        for t in range(num_steps):
            out = algo.act(model=model, obs=torch.as_tensor(self.obs), explore=True)
            steps = [self._step(index=i, action=out.actions[i]) for i in range(len(self.envs))]
            final_obs, rewards, terminated, truncated, next_obs = (np.stack(part) for part in zip(*steps))
            with torch.no_grad():  # V(s_{t+1}); V(final obs) of a truncated episode
                next_values = model.value(torch.as_tensor(final_obs)).numpy()
            row = {
                "obs": self.obs.astype(np.float32), "actions": out.actions, "log_prob": out.extras["log_prob"],
                "values": out.extras["values"], "next_values": next_values, "rewards": rewards.astype(np.float32),
                "terminated": terminated, "truncated": truncated,
                "cut": terminated | truncated | (t == num_steps - 1),
            }
            for key, value in row.items():
                columns[key].append(value)
            self.obs = next_obs
        # (time, env) → env-major rows: each env's fragment is one contiguous run in time order
        return {key: torch.as_tensor(_env_major(np.stack(value))) for key, value in columns.items()}

    def _step(self, *, index: int, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, np.ndarray]:
        """(obs after the step, reward, terminated, truncated, obs to act on next: a reset's after an episode)."""
        env = self.envs[index]
        obs, reward, terminated, truncated, _ = env.step(clip_action(action=action, space=env.action_space))
        self.episode_returns[index] += float(reward)
        next_obs = obs
        if terminated or truncated:
            self.finished_returns.append(float(self.episode_returns[index]))
            self.episode_returns[index] = 0.0
            next_obs = env.reset()[0]
        return obs, float(reward), bool(terminated), bool(truncated), next_obs


def _env_major(array: np.ndarray) -> np.ndarray:
    return np.swapaxes(array, 0, 1).reshape(-1, *array.shape[2:])


def spaces_of(env: gym.Env) -> EnvSpaces:
    return EnvSpaces(observation=env.observation_space, action=env.action_space)


def train(*, env_id: str, config: PPOConfig, num_envs: int, num_steps: int, total_env_steps: int, seed: int,
          stop_at_return: float | None = None) -> tuple[list[float], list[UpdateStats], int]:
    torch.manual_seed(seed)
    envs = [make_env(env_id=env_id, seed=seed + i, actor_rank=0) for i in range(num_envs)]
    algo = PPO(config=config)
    model = algo.make_model(spaces=spaces_of(envs[0]))
    optimizer = algo.make_optimizer(model=model)
    generator = torch.Generator().manual_seed(seed)
    actor = Actor(envs=envs)
    history: list[UpdateStats] = []
    env_steps = 0
    while env_steps < total_env_steps:
        batch = algo.postprocess(batch=actor.rollout(algo=algo, model=model, num_steps=num_steps))
        env_steps += num_envs * num_steps
        history.append(ppo_update(model=model, optimizer=optimizer, batch=batch, config=config,
                                  progress=env_steps / total_env_steps, generator=generator))
        recent = actor.finished_returns[-20:]
        if stop_at_return is not None and len(recent) == 20 and np.mean(recent) >= stop_at_return:
            break
    return actor.finished_returns, history, env_steps


CARTPOLE = PPOConfig(lr=1e-3, lr_schedule="linear", num_epochs=10, minibatch_size=128, gae_lambda=0.95, ent_coef=0.0)


def test_ppo_learns_cartpole_within_60k_env_steps() -> None:
    torch.set_num_threads(1)
    start = time.perf_counter()
    returns, history, env_steps = train(env_id="CartPole-v1", config=CARTPOLE, num_envs=4, num_steps=128,
                                        total_env_steps=60_000, seed=1, stop_at_return=150.0)
    wall_s = time.perf_counter() - start
    final = float(np.mean(returns[-20:]))
    logger.warning("CartPole: mean return of the last 20 episodes %.1f after %d env steps in %.1f s", final, env_steps,
                   wall_s)
    assert final >= 150.0, f"mean return {final:.1f} after {env_steps} env steps"
    assert all(stats.num_skipped_steps == 0 for stats in history)


def test_continuous_update_on_pendulum_produces_finite_stats() -> None:
    torch.manual_seed(0)
    config = PPOConfig(num_epochs=2, minibatch_size=32, vf_clip=0.2, target_kl=0.5)
    _, history, _ = train(env_id="Pendulum-v1", config=config, num_envs=2, num_steps=64, total_env_steps=256, seed=0)
    assert len(history) == 2
    for stats in history:
        values = [stats.policy_loss, stats.value_loss, stats.entropy, stats.approx_kl, stats.clip_fraction,
                  stats.explained_variance, stats.grad_norm, stats.lr]
        assert np.isfinite(values).all(), stats
        assert stats.num_gradient_steps > 0
