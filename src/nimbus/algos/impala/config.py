"""IMPALA / IMPACT config (frozen, validated).

Defaults follow Stellaris (SC'24) Table III for IMPACT, which took RLlib's tuned APPO examples:
lr 5e-4, γ 0.99, clip 0.4, entropy 0.01, value coefficient 1.0, target update every update; Table II
networks (MuJoCo 2×256 tanh; Atari a CNN). V-trace ρ̄ = c̄ = 1 and gradient-norm clip 40 follow
Espeholt et al. 2018. ``kl_coeff`` (RLlib ``use_kl_loss``, off by default) adds KL(π_target ‖ π).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ImpalaConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["impala"] = "impala"
    variant: Literal["impala", "impact"] = "impala"
    lr: float = Field(5e-4, gt=0)
    gamma: float = Field(0.99, ge=0, le=1)
    rollout_length: int = Field(50, ge=1)          # T: env steps per actor fragment = rows per time-major column
    rho_bar: float = Field(1.0, gt=0)              # V-trace ρ̄ (also truncates the pg importance weight)
    c_bar: float = Field(1.0, gt=0)                # V-trace c̄
    vf_coef: float = Field(1.0, ge=0)              # × 0.5·(v − V)²
    ent_coef: float = Field(0.01, ge=0)
    max_grad_norm: float | None = Field(40.0, gt=0)
    # IMPACT only: clipped surrogate over π/π_target, target network refresh (gradient steps, τ)
    clip_param: float = Field(0.4, gt=0)
    is_ratio_clip: float = Field(2.0, gt=0)        # RLlib clamps μ/π_target to [0, 2]
    target_update_interval: int = Field(1, ge=1)
    target_tau: float = Field(1.0, gt=0, le=1)
    kl_coeff: float = Field(0.0, ge=0)
    hidden_sizes: tuple[int, ...] = (256, 256)     # ActorCritic MLPs; uint8 image obs use a NatureCNN
    activation: Literal["tanh", "relu"] = "tanh"

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or any(width <= 0 for width in value):
            raise ValueError(f"hidden_sizes needs at least one layer, every width > 0; got {list(value)}")
        return value
