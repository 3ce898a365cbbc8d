"""Baseline actor-scaling controllers."""

from __future__ import annotations

from nimbus.control.base import RoundMetrics, ScalingDecision


class FixedScaler:
    """The same number of actor functions every round."""

    def __init__(self, *, num_actors: int) -> None:
        if num_actors < 1:
            raise ValueError(f"num_actors must be >= 1, got {num_actors}")
        self.num_actors = num_actors

    def initial(self) -> ScalingDecision:
        return ScalingDecision(num_actors=self.num_actors, reason="fixed")

    def decide(self, *, metrics: RoundMetrics) -> ScalingDecision:
        return ScalingDecision(num_actors=self.num_actors, reason="fixed")
