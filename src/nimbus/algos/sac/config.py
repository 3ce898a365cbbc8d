"""SAC config (frozen, validated).

Defaults: rl-baselines3-zoo ``hyperparams/sac.yml`` Pendulum-v1 sets only lr 1e-3 (20k steps); the
rest are Stable-Baselines3 SAC defaults it inherits: buffer 1M, learning_starts 100, batch 256,
τ 0.005, γ 0.99, train_freq 1, gradient_steps 1, target update every step, ent_coef "auto" starting
at α = 1 with target entropy −|A|, net [256, 256], one learning rate for actor, critic and α.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from nimbus.schema.base import ConfigSection
from nimbus.schema.fields import Widths, check_batch_fits


class SACConfig(ConfigSection):
    """SAC (Haarnoja et al. 2018) with twin critics; the entropy coefficient α is learned by default."""

    name: Literal["sac"] = "sac"
    """the algorithm: sac"""
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate of the actor, the critics and α (SB3 shares one)"""
    gamma: float = Field(0.99, ge=0, le=1)
    """discount factor γ"""
    buffer_capacity: int = Field(1_000_000, ge=1)
    """replay capacity in transitions (the oldest are overwritten)"""
    batch_size: int = Field(256, ge=1)
    """transitions per gradient step"""
    learning_starts: int = Field(100, ge=0)
    """env steps of uniform random actions before the first gradient step"""
    train_freq: int = Field(1, ge=1)
    """env steps between training phases"""
    gradient_steps: int = Field(1, ge=1)
    """gradient steps per training phase"""
    tau: float = Field(0.005, gt=0, le=1)
    """Polyak factor of the target critics"""
    target_update_interval: int = Field(1, ge=1)
    """gradient steps between target updates"""
    autotune_alpha: bool = True
    """learn log α towards target_entropy (False: α stays init_alpha)"""
    init_alpha: float = Field(1.0, gt=0)
    """entropy coefficient α at the start"""
    target_entropy: float | None = None
    """entropy target of the α tuning (None: −|A|, Haarnoja et al. 2018b)"""
    hidden_sizes: Widths = (256, 256)
    """MLP widths of the actor and the critics"""

    @model_validator(mode="after")
    def _check(self) -> SACConfig:
        check_batch_fits(batch_size=self.batch_size, capacity=self.buffer_capacity, capacity_key="buffer_capacity")
        return self
