"""IMPALA / IMPACT config (frozen, validated).

Defaults follow Stellaris (SC'24) Table III for IMPACT, which took RLlib's tuned APPO examples:
lr 5e-4, γ 0.99, clip 0.4, entropy 0.01, value coefficient 1.0; Table II networks (MuJoCo 2×256 tanh;
Atari a CNN). V-trace ρ̄ = c̄ = 1 and gradient-norm clip 40 follow Espeholt et al. 2018. ``kl_coeff``
(RLlib ``use_kl_loss``, off by default) adds KL(π_target ‖ π).

IMPACT (Luo et al. 2020, §3) needs its two parts to differ from IMPALA: a *circular buffer* that keeps
the last ``circular_buffer_batches`` FIFO batches and replays each ``circular_buffer_replays`` (K) times
(``data/fragment_replay.py`` ``Circular``), and a *target network* refreshed every ``target_update_interval`` (N)
learner steps. nimbus's defaults K = 2, 4 batches, N = 4 are choices, not tuned values. A config with
N = 1 and τ = 1 is refused: the target would be a copy of π at every loss (π/π_target = 1, no clipping),
i.e. IMPALA with a detour.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from nimbus.schema.base import ConfigSection
from nimbus.schema.fields import Widths


class ImpalaConfig(ConfigSection):
    """IMPALA (V-trace, Espeholt et al. 2018) or IMPACT (Luo et al. 2020): asynchronous actor-critic."""

    name: Literal["impala"] = "impala"
    """the algorithm: impala"""
    variant: Literal["impala", "impact"] = "impala"
    """impala (V-trace actor-critic) or impact (clipped surrogate against a target network, circular buffer)"""
    lr: float = Field(5e-4, gt=0)
    """learning rate"""
    gamma: float = Field(0.99, ge=0, le=1)
    """discount factor γ"""
    rollout_length: int = Field(50, ge=1)
    """T: env steps per actor fragment, the rows of one time-major column"""
    rho_bar: float = Field(1.0, gt=0)
    """V-trace ρ̄ (also truncates the policy-gradient importance weight)"""
    c_bar: float = Field(1.0, gt=0)
    """V-trace c̄"""
    vf_coef: float = Field(1.0, ge=0)
    """value loss coefficient, × ½·(v − V)²"""
    ent_coef: float = Field(0.01, ge=0)
    """entropy bonus coefficient"""
    max_grad_norm: float | None = Field(40.0, gt=0)
    """gradient-norm clip (None: no clipping)"""
    # IMPACT only: clipped surrogate over π/π_target, target network refresh (gradient steps, τ)
    clip_param: float = Field(0.4, gt=0)
    """IMPACT: surrogate clip ε over π/π_target"""
    is_ratio_clip: float = Field(2.0, gt=0)
    """IMPACT: μ/π_target is clamped to [0, this] (RLlib: 2)"""
    target_update_interval: int = Field(4, ge=1)
    """IMPACT: N, learner steps (one gradient step each) between target refreshes"""
    target_tau: float = Field(1.0, gt=0, le=1)
    """IMPACT: target refresh, 1 copies π, < 1 is a Polyak average"""
    kl_coeff: float = Field(0.0, ge=0)
    """IMPACT: coefficient of an added KL(π_target ‖ π) loss (RLlib use_kl_loss; 0: off)"""
    circular_buffer_replays: int = Field(2, ge=1)
    """IMPACT: K, times each FIFO batch is learned on"""
    circular_buffer_batches: int = Field(4, ge=1)
    """IMPACT: batches the circular buffer holds; the learner takes them round-robin"""
    hidden_sizes: Widths = (256, 256)
    """MLP widths of the actor-critic; uint8 image observations use a NatureCNN"""
    activation: Literal["tanh", "relu"] = "tanh"
    """MLP activation"""

    @model_validator(mode="after")
    def _impact_differs_from_impala(self) -> ImpalaConfig:
        if self.variant == "impact" and self.target_update_interval == 1 and self.target_tau == 1.0:
            raise ValueError("algo.target_update_interval: 1 with algo.target_tau: 1.0 makes variant impact "
                             "identical to impala (the target is π at every loss); set target_update_interval "
                             "> 1 or target_tau < 1")
        return self
