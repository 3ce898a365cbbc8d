"""The Controller contract and the per-round metrics row every controller reads.

A controller is a small object with ``decide(*, metrics) -> decision``; the trainer calls it once per
round with the row it just emitted. The seeds' baselines are controllers too, so an ablation is one
config line.

Example::

    scaler = FixedScaler(num_actors=4)
    decision = scaler.decide(metrics=row)     # ScalingDecision(num_actors=4, reason="fixed")
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nimbus.core import ActorScaler as ActorScaler, Controller as Controller  # the contracts live in core.py


@dataclass(frozen=True)
class RoundMetrics:
    """One row of metrics.jsonl: what happened in one round. Env steps are the x-axis."""

    round: int
    env_steps: int                # cumulative
    episodes: int                 # cumulative
    return_mean: float | None     # over episodes finished this round (None if none finished)
    return_min: float | None
    return_max: float | None
    num_actors: int
    num_learners: int
    policy_version: int
    sampling_s: float
    transfer_s: float
    learning_s: float
    round_s: float
    wall_s: float                 # since the run started
    cost_usd: float               # serverless cost so far, from the ledger
    losses: dict[str, float] = field(default_factory=dict)
    extras: dict[str, float] = field(default_factory=dict)  # controller signals: hessian ratio, score...


@dataclass(frozen=True)
class ScalingDecision:
    """How many actor functions to launch next round, and why (shown in the report)."""

    num_actors: int
    reason: str
    signals: dict[str, float] = field(default_factory=dict)
