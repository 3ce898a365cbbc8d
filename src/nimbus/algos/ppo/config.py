"""PPO's frozen config (the ``algo:`` section when ``name: ppo``).

Defaults follow CleanRL's ppo_continuous_action.py / Stable-Baselines3 (10 epochs, minibatch 64,
lr 3e-4, no value clipping). CleanRL's CartPole settings are: lr 2.5e-4 linear, num_epochs 4,
minibatch_size 128 (4 envs × 128 steps / 4), ent_coef 0.01, vf_clip 0.2.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Schedule = Literal["constant", "linear"]


class PPOConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["ppo"] = "ppo"
    gamma: float = Field(default=0.99, gt=0.0, le=1.0)
    gae_lambda: float = Field(default=0.95, ge=0.0, le=1.0)
    clip_coef: float = Field(default=0.2, gt=0.0)
    clip_schedule: Schedule = "constant"  # linear: clip_coef · (1 − progress)
    lr: float = Field(default=3e-4, gt=0.0)
    lr_schedule: Schedule = "constant"  # linear: lr · (1 − progress)
    num_epochs: int = Field(default=10, gt=0)
    minibatch_size: int = Field(default=64, gt=0)
    ent_coef: float = Field(default=0.0, ge=0.0)
    vf_coef: float = Field(default=0.5, ge=0.0)
    vf_clip: float | None = Field(default=None, gt=0.0)  # None: unclipped value loss
    max_grad_norm: float = Field(default=0.5, gt=0.0)
    normalize_advantages: bool = True  # per minibatch, as CleanRL
    target_kl: float | None = Field(default=None, gt=0.0)  # stop the epochs once approx_kl exceeds it
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: Literal["tanh", "relu"] = "tanh"
    normalize_obs: bool = False  # running mean/std of observations (nimbus.envs.normalize), applied by the actor
    adam_eps: float = Field(default=1e-5, gt=0.0)
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
