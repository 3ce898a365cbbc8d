"""DQN config (frozen, validated). Defaults: rl-baselines3-zoo ``hyperparams/dqn.yml`` CartPole-v1
("almost tuned": lr 2.3e-3, batch 64, buffer 100k, learning_starts 1000, train_freq 256,
gradient_steps 128, exploration_fraction 0.16, final eps 0.04, net [256, 256]); SB3 defaults for the
rest (Huber loss, max_grad_norm 10, tau 1.0); Schaul et al. 2016 for PER (α 0.6, β0 0.4).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class DQNConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["dqn"] = "dqn"
    lr: float = Field(2.3e-3, gt=0)
    gamma: float = Field(0.99, ge=0, le=1)
    n_step: int = Field(1, ge=1)                         # the replay computes returns_n / discount_n
    buffer_capacity: int = Field(100_000, ge=1)          # transitions
    batch_size: int = Field(64, ge=1)
    learning_starts: int = Field(1_000, ge=0)            # env steps before the first gradient step
    train_freq: int = Field(256, ge=1)                   # env steps between training phases
    gradient_steps: int = Field(128, ge=1)               # gradient steps per training phase
    # Hard copy (tau = 1) or Polyak average every this many *gradient steps*. SB3 counts env steps;
    # rl-zoo's CartPole 10 env steps inside a 256-step rollout amounts to one copy per training phase.
    target_update_interval: int = Field(128, ge=1)
    tau: float = Field(1.0, gt=0, le=1)
    exploration_fraction: float = Field(0.16, ge=0, le=1)  # of the run's total env steps
    exploration_initial_eps: float = Field(1.0, ge=0, le=1)
    exploration_final_eps: float = Field(0.04, ge=0, le=1)
    double_q: bool = True
    huber_delta: float = Field(1.0, gt=0)                # SB3's smooth_l1 (beta = 1)
    max_grad_norm: float | None = Field(10.0, gt=0)      # None disables clipping
    prioritized: bool = False
    per_alpha: float = Field(0.6, ge=0)
    per_beta0: float = Field(0.4, ge=0, le=1)            # annealed linearly to 1 over the run
    per_eps: float = Field(1e-6, gt=0)                   # priority = (|td| + eps) ** alpha
    hidden_sizes: tuple[int, ...] = (256, 256)           # MLP torso; image observations use NatureCNN
    model: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*[:.][A-Za-z_][\w.]*$",
                              description="your torch module instead of the built-in network, pkg.module:Class "
                                          "(README: custom models)")
    model_kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for algo.model's constructor")

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or any(width <= 0 for width in value):
            raise ValueError(f"hidden_sizes needs at least one layer, every width > 0; got {list(value)}")
        return value

    @model_validator(mode="after")
    def _check(self) -> DQNConfig:
        if self.batch_size > self.buffer_capacity:
            raise ValueError(f"batch_size ({self.batch_size}) exceeds buffer_capacity ({self.buffer_capacity})")
        return self
