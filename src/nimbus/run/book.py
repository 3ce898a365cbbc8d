"""The round's books: what every technique's round shares, kept by the run loop for each workflow it drives.

A workflow's handlers tell the book the facts (an update was non-finite; the round ended with this row); the book
keeps what no workflow should keep its own way:

    the row        the metrics row from the round's facts: the progress counters it reports, the returns'
                   statistics, the wall time since the run began (a resumed run's sessions together), the bill
    the bills      one CostMeter over the workflow's ledger (cost/meter.py): each row's ``cost_usd`` and
                   ``extras.cost_excl_cold_usd``, and the summary's serverless figures; provisioned time is billed
                   before a round's cost is read
    the guard      ``train.max_nonfinite_losses``: that many non-finite updates in a row stop the run
    the decision   the actor scaler's decision from the row, the pre-warmer warming up to it, the row carrying it
    the close      ``progress.last_row`` (what a checkpoint saves), then the loop's RoundHook (run/rounds.py:
                   evaluation, metrics.jsonl, trackers, the population's controller, a checkpoint when due)

Example (what a workflow's round end does)::

    book.count_nonfinite(nonfinite=learned.nonfinite)
    book.add_episodes(returns=[21.0, 35.0])
    row = book.row(index=3, returns=[21.0, 35.0], num_actors=4, num_learners=1, policy_version=4, now_s=clock(),
                   sampling_s=0.02, transfer_s=0.001, learning_s=0.03, round_s=0.06, losses={}, extras={})
    row, decision = book.decide(row=row, scaler=system.scaler, prewarmer=prewarmer, actors_before=4)
    book.close(row=row)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nimbus.config import NimbusConfig
from nimbus.cost.meter import CostMeter
from nimbus.nitro.probe import with_decision
from nimbus.types import Progress, RoundMetrics, ScalingDecision

if TYPE_CHECKING:
    from nimbus.types import Shared


class RoundBook:
    """One workflow's books (module docstring); the loop makes it and hands it over in ``Workflow.attach``."""

    def __init__(self, *, config: NimbusConfig, progress: Progress, shared: Shared,
                 on_round: Callable[[RoundMetrics], None] = lambda row: None) -> None:
        """``shared``: the workflow's ledger, pricing and runtime; ``on_round``: the loop's RoundHook. A resumed
        run's bills continue from the figures its checkpoint saved (``progress.cost_usd_before``...)."""
        self.config, self.progress, self.on_round = config, progress, on_round
        self.runtime = shared.runtime
        self.started_s = shared.runtime.now_s()   # the wall time of every row counts from here (this session)
        self.meter = CostMeter(ledger=shared.ledger, pricing=shared.pricing, before_usd=progress.cost_usd_before,
                               before_excl_cold_usd=progress.cost_excl_cold_usd_before)

    def bill_round(self) -> float:
        """The run's serverless cost so far, pre-warmed and provisioned time billed up to now first."""
        self.runtime.bill_provisioned()
        return self.meter.usd()

    def add_episodes(self, *, returns: list[float]) -> None:
        """Episodes that ended: the run's count and the window of recent returns (``train.return_window``) the
        target-return stop rule and the summary read."""
        progress = self.progress
        progress.episodes += len(returns)
        progress.recent_returns = (progress.recent_returns + returns)[-self.config.train.return_window:]

    def row(self, *, index: int, returns: list[float], num_actors: int, num_learners: int, policy_version: int,
            now_s: float, sampling_s: float, transfer_s: float, learning_s: float, round_s: float,
            losses: dict[str, float], extras: dict[str, float]) -> RoundMetrics:
        """Round ``index``'s metrics row from its facts (``returns``: the episodes it ended; ``now_s``: its end on
        the runtime's clock): the env steps and episodes so far, the returns' statistics, the wall time since the
        run began, the serverless bill so far (``bill_round``)."""
        progress = self.progress
        return RoundMetrics(
            round=index, env_steps=progress.env_steps, episodes=progress.episodes,
            return_mean=float(np.mean(returns)) if returns else None,
            return_min=float(np.min(returns)) if returns else None,
            return_max=float(np.max(returns)) if returns else None,
            num_actors=num_actors, num_learners=num_learners, policy_version=policy_version,
            sampling_s=sampling_s, transfer_s=transfer_s, learning_s=learning_s, round_s=round_s,
            wall_s=now_s - self.started_s + progress.wall_s_before, cost_usd=self.bill_round(), losses=losses,
            extras=extras)

    def count_nonfinite(self, *, nonfinite: bool, what: str = "learner updates",
                        outcome: str = "produced a non-finite loss or gradient") -> None:
        """One more update (non-finite: its step was skipped, the weights kept; or finite: the streak ends);
        ``train.max_nonfinite_losses`` in a row stop the run with NimbusError."""
        self.progress.count_nonfinite(nonfinite=nonfinite, limit=self.config.train.max_nonfinite_losses, what=what,
                                      outcome=outcome)

    def decide(self, *, row: RoundMetrics, scaler: Any, prewarmer: Any,
               actors_before: int) -> tuple[RoundMetrics, ScalingDecision]:
        """The scaler decides the next round's actors from ``row`` (Nitro reads its probe); the pre-warmer warms
        the workers a scale-up needs; the row with the decision's signals and ``next_num_actors``."""
        decision = scaler.decide(metrics=row)
        prewarmer.scale_up(from_actors=actors_before, to_actors=decision.num_actors)
        return with_decision(row=row, decision=decision), decision

    def close(self, *, row: RoundMetrics) -> None:
        """The round's row is final: its second bill, ``progress.last_row``, then the loop's hook."""
        row.extras["cost_excl_cold_usd"] = self.meter.excl_cold_usd()
        self.progress.last_row = row
        self.on_round(row)

    def cost_usd(self) -> float:
        """The run's serverless cost so far (the summary's figure)."""
        return self.meter.usd()
