"""Nitro's cost-aware actor scaler (paper 002, §5.2-5.3).

Each round the trainer probes the Hessian of the surrogate objective and puts R = −λmax/λmin in
``metrics.extras["hessian_ratio"]`` (``nimbus.analysis.hessian.HessianProbe.to_extras``). The scaler
keeps the last n valid values of R and turns the newest into an actor count for the next round::

    S_k = (R_max − R_k) / (R_max − R_min) · d^k        (min and max over the window, R_k included)
    I_k = clip(round(I_max · S_k), I_min, I_max)

A low R (a flat, poorly explored surface, §5.2 and §6.1) scores high and gets more actors; the decay d^k
spends the budget early, where boosting pays most (§5.3, Fig. 9). Once ``metrics.cost_usd`` reaches
``budget_usd`` the scaler stays at I_min; with ``on_budget="stop"`` (the default, the paper's §4: training
runs "until the DRL agent achieves the target reward or runs out of monetary budget") the decision also
carries ``budget_stop = 1`` and the trainer ends the run after that round.

``variant: authors_code`` is a separate class, ``nitro/scaler_authors.py`` (the public code, transcribed).

Decisions, each with its reason:

- Round index k is ``metrics.round``: the round whose update produced R_k. The count returned is for the
  next round's actors (the paper's order: update, probe, scale, sample; §4 steps 1-4).
- ``initial()`` (round 0, before any probe) is I_min: the paper boosts only "upon identifying a boostable
  round" (§4 step 2) and round 0 has no policy update to inspect; I_min is the non-boosted level (§5.3:
  "the minimum number of actors we can launch per round").
- A window without spread (R_max = R_min: one value, or equal values) scores S = 0, hence I_min. S is
  R_k's position within recent history; when R_k is the window's maximum the formula itself gives 0,
  and a degenerate window's R_k is its maximum. Without evidence that this round is more boostable
  than the last ones, the budget is kept for later opportunities (§3, third question).
- An unusable probe (R NaN or infinite, or ``extras["hessian_lambda_min"] >= 0``: a locally convex
  objective where R is not defined) is not put in the window and gives I_min: no evidence, no boost
  (repeating a boosted count would spend on a round nobody scored). ``signals["skipped_probes"]``
  counts such rounds. The budget check still applies.
- The window holds the last n *valid* values of R (the paper's W_n = {R_{k−n+1}, ..., R_k} when no probe
  is skipped).
- A missing ``hessian_ratio`` key raises :class:`MissingSignalError`: it is a wiring bug, not a signal.
- ``state_dict()`` / ``load_state_dict()`` carry the window, counters and budget flag as arrays, so a
  checkpoint can hold them (``train.checkpoint_replay``, policy/replay_checkpoint.py): a policy/scaling.py
  ``StatefulScaler``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

import numpy as np

from nimbus.analysis.hessian import HESSIAN_LAMBDA_MIN_KEY, HESSIAN_RATIO_KEY
from nimbus.errors import NimbusError
from nimbus.types import RoundMetrics, ScalingDecision

OnBudget = Literal["stop", "min"]
BUDGET_STOP_KEY = "budget_stop"   # a decision signal: 1.0 when the run must end after this round


class MissingSignalError(NimbusError):
    """A controller needs a signal that the round's metrics row does not carry."""


class Budget:
    """The dollar budget both Nitro variants share: spent once ``cost_usd`` reaches ``budget_usd``, for good.

    Example::

        budget = Budget(budget_usd=5.0, on_budget="stop")
        budget.observe(cost_usd=row.cost_usd)      # True from the first row at or above $5
        budget.signals(cost_usd=row.cost_usd)      # budget_left_usd, budget_spent, budget_stop
    """

    def __init__(self, *, budget_usd: float | None, on_budget: OnBudget = "stop") -> None:
        if budget_usd is not None and budget_usd <= 0.0:
            raise ValueError(f"budget_usd must be > 0 or None, got {budget_usd}")
        if on_budget not in ("stop", "min"):
            raise ValueError(f"on_budget must be 'stop' or 'min', got {on_budget!r}")
        self.budget_usd, self.on_budget = budget_usd, on_budget
        self.spent = False

    def observe(self, *, cost_usd: float) -> bool:
        if self.budget_usd is not None and cost_usd >= self.budget_usd:
            self.spent = True
        return self.spent

    def signals(self, *, cost_usd: float) -> dict[str, float]:
        if self.budget_usd is None:
            return {}
        return {"budget_left_usd": max(self.budget_usd - cost_usd, 0.0), "budget_spent": float(self.spent),
                BUDGET_STOP_KEY: float(self.spent and self.on_budget == "stop")}


class WindowedScaler:
    """What both Nitro variants share: the actor range, the window of valid probes, the budget, the state.

    Subclasses implement ``initial`` and ``decide``; ``_skip`` and ``_finish`` end a decision.
    """

    variant = "paper"

    def __init__(self, *, min_actors: int = 8, max_actors: int = 64, window: int = 6, decay: float = 0.96,
                 budget_usd: float | None = None, on_budget: OnBudget = "stop") -> None:
        check_actor_range(min_actors=min_actors, max_actors=max_actors, window=window, decay=decay)
        self.min_actors, self.max_actors, self.decay = min_actors, max_actors, decay
        self.budget = Budget(budget_usd=budget_usd, on_budget=on_budget)
        self._window: deque[float] = deque(maxlen=window)
        self._skipped_probes = 0

    @property
    def budget_usd(self) -> float | None:
        return self.budget.budget_usd

    @property
    def window_values(self) -> tuple[float, ...]:
        """The values in the sliding window, oldest first."""
        return tuple(self._window)

    def _skip(self, reason: str, signals: dict[str, float]) -> ScalingDecision:
        """An unusable probe: nothing enters the window, I_min (no evidence, no boost)."""
        self._skipped_probes += 1
        signals["skipped_probes"] = float(self._skipped_probes)
        return self._finish(self.min_actors, f"probe skipped: {reason}", signals)

    def _finish(self, num_actors: int, reason: str, signals: dict[str, float]) -> ScalingDecision:
        if self.budget.spent:
            num_actors, reason = self.min_actors, "budget spent"
        return ScalingDecision(num_actors=num_actors, reason=reason, signals=signals)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The window and counters as arrays (a checkpoint stores them as safetensors)."""
        return {"window": np.asarray(self._window, dtype=np.float64),
                "counters": np.asarray([self._skipped_probes, int(self.budget.spent)], dtype=np.int64)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self._window.clear()
        self._window.extend(float(v) for v in state["window"])
        self._skipped_probes, spent = (int(v) for v in state["counters"])
        self.budget.spent = bool(spent)


class NitroScaler(WindowedScaler):
    """Actors per round from the Hessian convexity ratio R (see the module docstring for the rules).

    Example::

        scaler = NitroScaler(min_actors=8, max_actors=64, budget_usd=5.0)
        first = scaler.initial()                    # 8 actors for round 0
        decision = scaler.decide(metrics=row)       # row.extras["hessian_ratio"] = R_k
        decision.signals                            # hessian_ratio, score, window_min/max, budget_left_usd...
    """

    def initial(self) -> ScalingDecision:
        return ScalingDecision(num_actors=self.min_actors, reason="initial: no probe yet")

    def decide(self, *, metrics: RoundMetrics) -> ScalingDecision:
        ratio = read_ratio(metrics)
        k = metrics.round
        self.budget.observe(cost_usd=metrics.cost_usd)
        signals = self.budget.signals(cost_usd=metrics.cost_usd)
        skip_reason = unusable_probe(ratio, metrics.extras)
        if skip_reason is not None:
            return self._skip(skip_reason, signals)
        self._window.append(ratio)
        low, high = min(self._window), max(self._window)
        score = 0.0 if high == low else (high - ratio) / (high - low) * self.decay**k  # no spread: no evidence
        target = self.max_actors * score
        signals.update(
            hessian_ratio=ratio, window_value=ratio, score=score, window_min=low, window_max=high,
            window_len=float(len(self._window)), decay_factor=self.decay**k,
            skipped_probes=float(self._skipped_probes), target_actors=target,
        )
        num_actors = min(max(math.floor(target + 0.5), self.min_actors), self.max_actors)   # round half up
        return self._finish(num_actors, "nitro score" if high > low else "window has no spread", signals)


def check_actor_range(*, min_actors: int, max_actors: int, window: int, decay: float) -> None:
    """The constructor checks both Nitro variants share (ValueError naming the argument)."""
    if not 1 <= min_actors <= max_actors:
        raise ValueError(
            f"need 1 <= min_actors <= max_actors, got min_actors={min_actors}, max_actors={max_actors}"
        )
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"decay must be in (0, 1], got {decay}")


def read_ratio(metrics: RoundMetrics) -> float:
    try:
        return float(metrics.extras[HESSIAN_RATIO_KEY])
    except KeyError:
        raise MissingSignalError(
            f"NitroScaler needs metrics.extras[{HESSIAN_RATIO_KEY!r}] but round {metrics.round} has "
            f"{sorted(metrics.extras)}; run the Hessian probe every round "
            "(nimbus.analysis.hessian.extreme_eigenvalues(...).to_extras())"
        ) from None


def unusable_probe(ratio: float, extras: dict[str, float]) -> str | None:
    """Why this round's R must not enter the window, or None if it may."""
    if not math.isfinite(ratio):
        return "ratio not finite"
    lambda_min = extras.get(HESSIAN_LAMBDA_MIN_KEY)
    if lambda_min is not None and not lambda_min < 0.0:     # also catches NaN
        return "lambda_min >= 0"
    return None
