"""PPO's frozen config (the ``algo:`` section when ``name: ppo``).

Defaults follow CleanRL's ppo_continuous_action.py / Stable-Baselines3 (10 epochs, minibatch 64,
lr 3e-4, no value clipping). CleanRL's CartPole settings are: lr 2.5e-4 linear, num_epochs 4,
minibatch_size 128 (4 envs × 128 steps / 4), ent_coef 0.01, vf_clip 0.2.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nimbus.schema.base import ConfigSection
from nimbus.schema.fields import ModelKwargs, ModelRef, Widths

Schedule = Literal["constant", "linear"]


class PPOConfig(ConfigSection):
    """PPO (Schulman et al. 2017) with GAE."""

    name: Literal["ppo"] = "ppo"
    """the algorithm: ppo"""
    gamma: float = Field(default=0.99, gt=0.0, le=1.0)
    """discount factor γ"""
    gae_lambda: float = Field(default=0.95, ge=0.0, le=1.0)
    """GAE λ (1: Monte-Carlo returns, 0: one-step TD)"""
    clip_coef: float = Field(default=0.2, gt=0.0)
    """surrogate clip ε: the ratio π/π_old is clipped to [1 − ε, 1 + ε]"""
    clip_schedule: Schedule = "constant"
    """constant, or linear: clip_coef · (1 − progress) over the run's env steps"""
    lr: float = Field(default=3e-4, gt=0.0)
    """Adam learning rate"""
    lr_schedule: Schedule = "constant"
    """constant, or linear: lr · (1 − progress) over the run's env steps"""
    num_epochs: int = Field(default=10, gt=0)
    """passes over each round's batch"""
    minibatch_size: int = Field(default=64, gt=0)
    """rows per gradient step (at most the rows of one round)"""
    ent_coef: float = Field(default=0.0, ge=0.0)
    """entropy bonus coefficient"""
    vf_coef: float = Field(default=0.5, ge=0.0)
    """value loss coefficient"""
    vf_clip: float | None = Field(default=None, gt=0.0)
    """clip the value loss around the old values by ± this (None: unclipped, as SB3)"""
    max_grad_norm: float = Field(default=0.5, gt=0.0)
    """global gradient-norm clip"""
    normalize_advantages: bool = True
    """normalise advantages per minibatch (as CleanRL)"""
    target_kl: float | None = Field(default=None, gt=0.0)
    """stop the epochs once approx_kl exceeds it (None: always run num_epochs)"""
    hidden_sizes: Widths = (64, 64)
    """MLP widths of the actor and the critic; image observations use a NatureCNN torso"""
    activation: Literal["tanh", "relu"] = "tanh"
    """MLP activation"""
    normalize_obs: bool = False
    """running mean/std normalisation of observations, updated and applied by the actors"""
    adam_eps: float = Field(default=1e-5, gt=0.0)
    """Adam ε"""
    model: ModelRef = None
    model_kwargs: ModelKwargs
