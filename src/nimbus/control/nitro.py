"""Nitro's cost-aware actor scaler (paper 002, §5.2-5.3; DESIGN §3).

Each round the trainer probes the Hessian of the surrogate objective and puts R = −λmax/λmin in
``metrics.extras["hessian_ratio"]`` (``nimbus.analysis.hessian.HessianProbe.to_extras``). The scaler
keeps the last n valid values of R and turns the newest into an actor count for the next round::

    S_k = (R_max − R_k) / (R_max − R_min) · d^k        (min and max over the window, R_k included)
    I_k = clip(round(I_max · S_k), I_min, I_max)

A low R (a flat, poorly explored surface, §5.2 and §6.1) scores high and gets more actors; the decay d^k
spends the budget early, where boosting pays most (§5.3, Fig. 9). Once ``metrics.cost_usd`` reaches
``budget_usd`` the scaler stays at I_min for the rest of the run ("budget spent").

``variant="authors_code"`` reproduces the authors' public code instead (DESIGN §3): it decays R, not the
score, and scores *high* R as boostable, ``S_k = (r_k − r_min)/(r_max − r_min)`` with ``r = R · d^k`` in the
window, and never goes below a floor of ``I_max · d^(k²)`` actors, which front-loads spending.

Decisions, each with its reason:

- Round index k is ``metrics.round``: the round whose update produced R_k. The count returned is for the
  next round's actors (the paper's order: update, probe, scale, sample; §4 steps 1-4).
- ``initial()`` (round 0, before any probe) is I_min for the paper variant: the paper boosts only "upon
  identifying a boostable round" (§4 step 2) and round 0 has no policy update to inspect; I_min is the
  non-boosted level (§5.3: "the minimum number of actors we can launch per round"). For
  ``authors_code`` it is its own floor at k = 0, I_max · d^0 = I_max.
- A window without spread (R_max = R_min: one value, or equal values) scores S = 0, hence I_min (or the
  floor). S is R_k's position within recent history; when R_k is the window's maximum the formula
  itself gives 0, and a degenerate window's R_k is its maximum. Without evidence that this round is
  more boostable than the last ones, the budget is kept for later opportunities (§3, third question).
- An unusable probe (R NaN or infinite, or ``extras["hessian_lambda_min"] >= 0``: a locally convex
  objective where R is not defined) is not put in the window; the previous decision is repeated and
  ``signals["skipped_probes"]`` counts such rounds. The budget check still applies.
- The window holds the last n *valid* values of R (the paper's W_n = {R_{k−n+1}, ..., R_k} when no probe
  is skipped).
- A missing ``hessian_ratio`` key raises :class:`MissingSignalError`: it is a wiring bug, not a signal.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

from nimbus.analysis.hessian import HESSIAN_LAMBDA_MIN_KEY, HESSIAN_RATIO_KEY
from nimbus.control.base import RoundMetrics, ScalingDecision
from nimbus.errors import NimbusError

NitroVariant = Literal["paper", "authors_code"]


class MissingSignalError(NimbusError):
    """A controller needs a signal that the round's metrics row does not carry."""


class NitroScaler:
    """Actors per round from the Hessian convexity ratio R (see the module docstring for the rules).

    Example::

        scaler = NitroScaler(min_actors=8, max_actors=64, budget_usd=5.0)
        first = scaler.initial()                    # 8 actors for round 0
        decision = scaler.decide(metrics=row)       # row.extras["hessian_ratio"] = R_k
        decision.signals                            # hessian_ratio, score, window_min/max, budget_left_usd...
    """

    def __init__(
        self,
        *,
        min_actors: int = 8,
        max_actors: int = 64,
        window: int = 6,
        decay: float = 0.96,
        budget_usd: float | None = None,
        variant: NitroVariant = "paper",
    ) -> None:
        if not 1 <= min_actors <= max_actors:
            raise ValueError(
                f"need 1 <= min_actors <= max_actors, got min_actors={min_actors}, max_actors={max_actors}"
            )
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        if budget_usd is not None and budget_usd <= 0.0:
            raise ValueError(f"budget_usd must be > 0 or None, got {budget_usd}")
        if variant not in ("paper", "authors_code"):
            raise ValueError(f"variant must be 'paper' or 'authors_code', got {variant!r}")
        self.min_actors = min_actors
        self.max_actors = max_actors
        self.decay = decay
        self.budget_usd = budget_usd
        self.variant: NitroVariant = variant
        self._window: deque[float] = deque(maxlen=window)
        self._skipped_probes = 0
        self._budget_spent = False
        self._last_num_actors = self.initial().num_actors

    @property
    def window_values(self) -> tuple[float, ...]:
        """The values in the sliding window, oldest first (R, or R·d^k for ``authors_code``)."""
        return tuple(self._window)

    def initial(self) -> ScalingDecision:
        if self.variant == "authors_code":
            return ScalingDecision(num_actors=self._clip(self._floor(0)), reason="initial: authors_code floor")
        return ScalingDecision(num_actors=self.min_actors, reason="initial: no probe yet")

    def decide(self, *, metrics: RoundMetrics) -> ScalingDecision:
        ratio = _read_ratio(metrics)
        k = metrics.round
        if self.budget_usd is not None and metrics.cost_usd >= self.budget_usd:
            self._budget_spent = True
        signals = self._budget_signals(metrics.cost_usd)
        skip_reason = _unusable_probe(ratio, metrics.extras)
        if skip_reason is not None:
            self._skipped_probes += 1
            signals["skipped_probes"] = float(self._skipped_probes)
            return self._finish(self._last_num_actors, f"probe skipped: {skip_reason}", signals)

        value = ratio * self.decay**k if self.variant == "authors_code" else ratio
        self._window.append(value)
        low, high = min(self._window), max(self._window)
        score = self._score(value, low, high, k)
        target = self.max_actors * score
        reason = "nitro score" if high > low else "window has no spread"
        signals.update(
            hessian_ratio=ratio, window_value=value, score=score, window_min=low, window_max=high,
            window_len=float(len(self._window)), decay_factor=self.decay**k,
            skipped_probes=float(self._skipped_probes),
        )
        if self.variant == "authors_code":
            floor = self._floor(k)
            signals["floor_actors"] = floor
            if floor > target:
                target, reason = floor, "authors_code floor"
        signals["target_actors"] = target
        return self._finish(self._clip(target), reason, signals)

    def _score(self, value: float, low: float, high: float, k: int) -> float:
        if high == low:          # one value or equal values: no evidence of a boostable round (module doc)
            return 0.0
        if self.variant == "authors_code":
            return (value - low) / (high - low)
        return (high - value) / (high - low) * self.decay**k

    def _floor(self, k: int) -> float:
        return self.max_actors * self.decay ** (k * k)

    def _clip(self, target: float) -> int:
        return min(max(math.floor(target + 0.5), self.min_actors), self.max_actors)   # round half up

    def _budget_signals(self, cost_usd: float) -> dict[str, float]:
        if self.budget_usd is None:
            return {}
        return {"budget_left_usd": max(self.budget_usd - cost_usd, 0.0), "budget_spent": float(self._budget_spent)}

    def _finish(self, num_actors: int, reason: str, signals: dict[str, float]) -> ScalingDecision:
        if self._budget_spent:
            num_actors, reason = self.min_actors, "budget spent"
        self._last_num_actors = num_actors
        return ScalingDecision(num_actors=num_actors, reason=reason, signals=signals)


def _read_ratio(metrics: RoundMetrics) -> float:
    try:
        return float(metrics.extras[HESSIAN_RATIO_KEY])
    except KeyError:
        raise MissingSignalError(
            f"NitroScaler needs metrics.extras[{HESSIAN_RATIO_KEY!r}] but round {metrics.round} has "
            f"{sorted(metrics.extras)}; run the Hessian probe every round "
            "(nimbus.analysis.hessian.extreme_eigenvalues(...).to_extras())"
        ) from None


def _unusable_probe(ratio: float, extras: dict[str, float]) -> str | None:
    """Why this round's R must not enter the window, or None if it may."""
    if not math.isfinite(ratio):
        return "ratio not finite"
    lambda_min = extras.get(HESSIAN_LAMBDA_MIN_KEY)
    if lambda_min is not None and not lambda_min < 0.0:     # also catches NaN
        return "lambda_min >= 0"
    return None
