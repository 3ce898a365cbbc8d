"""Baseline actor-scaling controllers."""

from __future__ import annotations

from nimbus.types import RoundMetrics, ScalingDecision


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


class HydrozoaScaler:
    """Hydrozoa's schedule (Nitro §8.3 baseline): double the actors every k rounds, capped at max_actors.

    Round r runs ``min(initial_actors * 2 ** (r // double_every_rounds), max_actors)`` actors; the metrics
    of round r decide round r + 1. The schedule ignores metrics and budget, as the baseline does.
    """

    def __init__(self, *, initial_actors: int, max_actors: int, double_every_rounds: int) -> None:
        if initial_actors < 1 or double_every_rounds < 1:
            raise ValueError(
                f"initial_actors and double_every_rounds must be >= 1, got {initial_actors}, {double_every_rounds}"
            )
        if max_actors < initial_actors:
            raise ValueError(f"max_actors ({max_actors}) must be >= initial_actors ({initial_actors})")
        self.initial_actors = initial_actors
        self.max_actors = max_actors
        self.double_every_rounds = double_every_rounds

    def actors_at(self, *, round_index: int) -> int:
        doublings = round_index // self.double_every_rounds
        if doublings >= self.max_actors.bit_length():    # already past the cap; avoids huge powers
            return self.max_actors
        return min(self.initial_actors * 2**doublings, self.max_actors)

    def initial(self) -> ScalingDecision:
        return ScalingDecision(num_actors=self.actors_at(round_index=0), reason="hydrozoa schedule")

    def decide(self, *, metrics: RoundMetrics) -> ScalingDecision:
        return ScalingDecision(num_actors=self.actors_at(round_index=metrics.round + 1), reason="hydrozoa schedule")


class MaxScaler:
    """Always the largest actor count (Nitro's upper-bound baseline)."""

    def __init__(self, *, max_actors: int) -> None:
        if max_actors < 1:
            raise ValueError(f"max_actors must be >= 1, got {max_actors}")
        self.max_actors = max_actors

    def initial(self) -> ScalingDecision:
        return ScalingDecision(num_actors=self.max_actors, reason="max")

    def decide(self, *, metrics: RoundMetrics) -> ScalingDecision:
        return ScalingDecision(num_actors=self.max_actors, reason="max")
