"""DQN config (frozen, validated). Defaults: rl-baselines3-zoo ``hyperparams/dqn.yml`` CartPole-v1
("almost tuned": lr 2.3e-3, batch 64, buffer 100k, learning_starts 1000, train_freq 256,
gradient_steps 128, exploration_fraction 0.16, final eps 0.04, net [256, 256]); SB3 defaults for the
rest (Huber loss, max_grad_norm 10, tau 1.0); Schaul et al. 2016 for PER (α 0.6, β0 0.4).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from nimbus.schema.base import ConfigSection
from nimbus.schema.fields import ModelKwargs, ModelRef, Widths, check_batch_fits


class DQNConfig(ConfigSection):
    """DQN with double-Q targets, n-step returns and optional prioritized replay."""

    name: Literal["dqn"] = "dqn"
    """the algorithm: dqn"""
    lr: float = Field(2.3e-3, gt=0)
    """Adam learning rate"""
    gamma: float = Field(0.99, ge=0, le=1)
    """discount factor γ"""
    n_step: int = Field(1, ge=1)
    """n-step returns: the replay computes returns_n / discount_n over up to n steps"""
    buffer_capacity: int = Field(100_000, ge=1)
    """replay capacity in transitions (the oldest are overwritten)"""
    batch_size: int = Field(64, ge=1)
    """transitions per gradient step"""
    learning_starts: int = Field(1_000, ge=0)
    """env steps collected before the first gradient step"""
    train_freq: int = Field(256, ge=1)
    """env steps between training phases"""
    gradient_steps: int = Field(128, ge=1)
    """gradient steps per training phase"""
    # Hard copy (tau = 1) or Polyak average every this many *gradient steps*. SB3 counts env steps;
    # rl-zoo's CartPole 10 env steps inside a 256-step rollout amounts to one copy per training phase.
    target_update_interval: int = Field(128, ge=1)
    """gradient steps between target updates (SB3 counts env steps)"""
    tau: float = Field(1.0, gt=0, le=1)
    """target update: 1 copies the online network, < 1 is a Polyak average"""
    exploration_fraction: float = Field(0.16, ge=0, le=1)
    """fraction of train.total_env_steps over which ε decays linearly"""
    exploration_initial_eps: float = Field(1.0, ge=0, le=1)
    """ε at the start"""
    exploration_final_eps: float = Field(0.04, ge=0, le=1)
    """ε after the decay"""
    double_q: bool = True
    """double DQN targets: the online network picks a*, the target network values it"""
    huber_delta: float = Field(1.0, gt=0)
    """Huber loss δ (SB3's smooth_l1 with β = 1)"""
    max_grad_norm: float | None = Field(10.0, gt=0)
    """gradient-norm clip (None: no clipping)"""
    prioritized: bool = False
    """prioritized replay (Schaul et al. 2016) instead of uniform"""
    per_alpha: float = Field(0.6, ge=0)
    """PER α: priority exponent"""
    per_beta0: float = Field(0.4, ge=0, le=1)
    """PER β at the start, annealed linearly to 1 over the run"""
    per_eps: float = Field(1e-6, gt=0)
    """PER ε: priority = (|td| + ε) ** α"""
    hidden_sizes: Widths = (256, 256)
    """MLP widths of the Q-network; image observations use a NatureCNN torso"""
    model: ModelRef = None
    model_kwargs: ModelKwargs

    @model_validator(mode="after")
    def _check(self) -> DQNConfig:
        check_batch_fits(batch_size=self.batch_size, capacity=self.buffer_capacity, capacity_key="buffer_capacity")
        return self
