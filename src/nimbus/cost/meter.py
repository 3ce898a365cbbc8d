"""The run's second bill, kept as the ledger grows: the cost without cold starts and provisioned idle time.

``cost_usd`` (the workflows' running total) bills everything the ledger holds; the papers' figures exclude cold
starts and pre-warm/keep-alive time (Stellaris §VIII-A), so a run also reports ``cost_excl_cold_usd``
(``PricingModel.cost_excl_cold_usd``, cost/pricing.py): the run loop writes it into each metrics row's
``extras`` and ``summary.json`` (``serverless_cost_excl_cold_usd``). The meter reads only the records written
since its last call (O(new records)), from the same ledger as the workflow's ``cost_usd``; a resumed run starts
from the figure its checkpoint saved (``before_usd``).

Example::

    meter = ExclColdMeter(ledger=shared.ledger, pricing=shared.pricing, before_usd=0.0)
    meter.usd()        # 0.0123: every record so far, cold starts and provisioned idle time left out
"""

from __future__ import annotations

from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import PricingModel


class ExclColdMeter:
    """The running ``cost_excl_cold_usd`` of one ledger (module docstring)."""

    def __init__(self, *, ledger: Ledger, pricing: PricingModel, before_usd: float = 0.0) -> None:
        self._ledger, self._pricing = ledger, pricing
        self._seen, self._usd = 0, before_usd

    @classmethod
    def resumed(cls, *, ledger: Ledger, pricing: PricingModel, cost_usd_before: float,
                cost_excl_cold_usd_before: float | None) -> "ExclColdMeter":
        """A meter continuing the sessions before this one (a resumed run's ``Progress``): from the figure its
        checkpoint saved, else (a checkpoint written without it) from their full cost."""
        before = cost_usd_before if cost_excl_cold_usd_before is None else cost_excl_cold_usd_before
        return cls(ledger=ledger, pricing=pricing, before_usd=before)

    def usd(self) -> float:
        """The figure up to the newest record."""
        records = self._ledger.records_since(start=self._seen)
        for record in records:
            self._usd += self._pricing.cost_excl_cold_usd(record=record)
        self._seen += len(records)
        return self._usd
