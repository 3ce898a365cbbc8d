"""A run's two bills, kept as the ledger grows: one meter reads each new record once and prices it both ways.

``usd`` bills everything the ledger holds (``PricingModel.cost_usd``: the serverless figure of every metrics row's
``cost_usd`` and of summary.json); the papers' figures exclude cold starts and pre-warm/keep-alive time (Stellaris
§VIII-A), so a run also reports ``excl_cold_usd`` (``PricingModel.cost_excl_cold_usd``, cost/pricing.py: each row's
``extras.cost_excl_cold_usd`` and summary.json's ``serverless_cost_excl_cold_usd``). Each call reads only the
records written since the last one (O(new records)); a resumed run starts from the figures its checkpoint saved.

Example::

    meter = CostMeter(ledger=shared.ledger, pricing=shared.pricing)
    meter.usd()             # 0.0150: every record so far
    meter.excl_cold_usd()   # 0.0123: cold starts and provisioned idle time left out
    meter.usd_by_kind()     # {"actor": 0.0101, "learner": 0.0049}: this session's records per function kind
"""

from __future__ import annotations

from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import PricingModel


class CostMeter:
    """Both running bills of one ledger (module docstring)."""

    def __init__(self, *, ledger: Ledger, pricing: PricingModel, before_usd: float = 0.0,
                 before_excl_cold_usd: float | None = None) -> None:
        """``before_usd``, ``before_excl_cold_usd``: the sessions before this one (a resumed run's checkpoint);
        a checkpoint written without the second figure counts them at their full cost."""
        self._ledger, self._pricing = ledger, pricing
        self._seen = 0
        self._usd = before_usd
        self._excl_cold_usd = before_usd if before_excl_cold_usd is None else before_excl_cold_usd
        self._by_kind: dict[str, float] = {}

    def _read(self) -> None:
        records = self._ledger.records_since(start=self._seen)
        for record in records:
            usd = self._pricing.cost_usd(record=record)
            self._usd += usd
            self._excl_cold_usd += self._pricing.cost_excl_cold_usd(record=record)
            self._by_kind[record.kind] = self._by_kind.get(record.kind, 0.0) + usd
        self._seen += len(records)

    def usd(self) -> float:
        """Every record up to the newest, cold starts and provisioned time included."""
        self._read()
        return self._usd

    def excl_cold_usd(self) -> float:
        """Every record up to the newest, without cold starts and provisioned idle time."""
        self._read()
        return self._excl_cold_usd

    def usd_by_kind(self) -> dict[str, float]:
        """This session's dollars per function kind (actor, learner, parameter, ...), up to the newest record."""
        self._read()
        return dict(self._by_kind)
