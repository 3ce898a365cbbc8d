"""The round's books: what every technique's round shares, kept by the run loop for each workflow it drives.

A workflow's handlers tell the book the facts (an update was non-finite; the round ended with this row); the book
keeps what no workflow should keep its own way:

    the bills      one CostMeter over the workflow's ledger (cost/meter.py): each row's ``cost_usd`` and
                   ``extras.cost_excl_cold_usd``, and the summary's serverless figures; provisioned time is billed
                   before a round's cost is read
    the guard      ``train.max_nonfinite_losses``: that many non-finite updates in a row stop the run
    the decision   the actor scaler's decision from the row, the pre-warmer warming up to it, the row carrying it
    the close      ``progress.last_row`` (what a checkpoint saves), then the loop's RoundHook (run/rounds.py:
                   evaluation, metrics.jsonl, trackers, the population's controller, a checkpoint when due)

Example (what a workflow's round end does)::

    row = RoundMetrics(..., cost_usd=book.bill_round(), ...)
    book.count_nonfinite(nonfinite=header["nonfinite"])
    row, decision = book.decide(row=row, scaler=system.scaler, prewarmer=prewarmer, actors_before=4)
    book.close(row=row)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
        self.meter = CostMeter(ledger=shared.ledger, pricing=shared.pricing, before_usd=progress.cost_usd_before,
                               before_excl_cold_usd=progress.cost_excl_cold_usd_before)

    def bill_round(self) -> float:
        """The run's serverless cost so far, pre-warmed and provisioned time billed up to now first."""
        self.runtime.bill_provisioned()
        return self.meter.usd()

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
