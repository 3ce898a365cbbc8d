"""Nitro's actor scaler as the authors' public code does it (``variant: authors_code``): nimbus
implements the paper and offers the code's behaviour as a named option, so the two can be compared.

Transcribed from IntelliSys-Lab/Nitro ``Nitro.py`` at commit 2c725a94b033848726dbff0fbc958e6df317a444, with
``config.py`` (``Nitro_sliding_window = 6``, ``Nitro_decay_factor = 0.96``, ``num_rollout_workers_*``); nimbus's
names on the left, theirs in the comments. Per round, after the update::

    R_code = row["hessian_ratio"]       # hessian_eigen_ratio from utils.eval_hessian: the authors' probe
                                        # (nitro/probe_authors.py), −(θmax + 0.01)/(θmin − 0.01) of the loss
    decay = d ** k                      # decay_factor = Nitro_decay_factor ** round_id; round_id starts at 1
    r = R_code * decay;  window.append(r)
    S = (r − min W) / (max W − min W) if len(W) > 1 else 1.0
    floor = int(clip(I_max · decay ** k, I_min, I_max))       # = I_max · d^(k²), truncated
    I = int(clip(I_max · S, floor, I_max))                     # truncated, not rounded
    window.append(R_code)               # hessian_history['ratio'].append(hessian_eigen_ratio): the raw value too

and the first round runs ``num_rollout_workers_serverful`` = 16 of ``num_rollout_workers_max`` = 64
actors, i.e. I_max // 4 here (clipped to [I_min, I_max]). So the window (maxlen n = 6) holds the decayed
and the raw value of each of the last three rounds, and a high R_code scores as boostable.

The row must come from the authors' probe: a finite R without its ``hessian_grid_padding`` key raises
``MissingSignalError`` (the paper probe's R is another quantity; reading it would be a wiring bug). A NaN R
without it (``probe.probe_not_run``: an off-policy update that could not be probed) is skipped.

Where the public code has no answer, nimbus decides (docs/nitro.md):

* ``max W == min W`` with more than one value (e.g. ``decay: 1``): ``Nitro.py`` divides 0 by 0 and
  ``int(nan)`` raises. This class scores such a window 1.0, as their code scores a window of one value.
* A non-finite R (a failed probe, or an off-policy update that could not be probed) is skipped as in the
  paper variant: nothing enters the window and the round gets I_min. The public code has no such guard.
  Any finite R enters the window, as in their code (no λmin ≥ 0 test: their grid's ratio is defined).
* The budget (``Budget``: I_min once spent; ``on_budget: stop`` ends the run) is nimbus's, shared with the
  paper variant; the public config's budget is infinite.

Example::

    scaler = AuthorsCodeNitroScaler(min_actors=8, max_actors=64)
    scaler.initial().num_actors                   # 16
    scaler.decide(metrics=row).num_actors         # row.round = 0 is their round_id 1
"""

from __future__ import annotations

import math

import numpy as np

from nimbus.nitro.probe_authors import AUTHORS_SIGNAL_KEY
from nimbus.nitro.scaler import MissingSignalError, WindowedScaler, read_ratio
from nimbus.types import RoundMetrics, ScalingDecision


class AuthorsCodeNitroScaler(WindowedScaler):
    """The public code's scaler (module docstring); same constructor and signals as ``NitroScaler``."""

    variant = "authors_code"

    def initial(self) -> ScalingDecision:
        first = min(max(self.max_actors // 4, self.min_actors), self.max_actors)   # 16 of 64 in their config
        return ScalingDecision(num_actors=first, reason="initial: authors_code serverful count")

    def decide(self, *, metrics: RoundMetrics) -> ScalingDecision:
        code_ratio = read_ratio(metrics)                   # their hessian_eigen_ratio (nitro/probe_authors.py)
        if AUTHORS_SIGNAL_KEY not in metrics.extras and math.isfinite(code_ratio):   # NaN: probe_not_run, skipped
            raise MissingSignalError(f"variant authors_code reads the authors' probe, but round {metrics.round}'s row "
                                     f"has no {AUTHORS_SIGNAL_KEY!r} (a paper probe?); the probe request must carry "
                                     "signal: authors_code (nitro/probe.py probe_request)")
        self.budget.observe(cost_usd=metrics.cost_usd)
        signals = self.budget.signals(cost_usd=metrics.cost_usd)
        if not math.isfinite(code_ratio):
            return self._skip("ratio not finite", signals)
        round_id = metrics.round + 1                       # their round_id starts at 1
        decay_factor = self.decay**round_id
        value = code_ratio * decay_factor
        self._window.append(value)
        high, low = float(np.max(self._window)), float(np.min(self._window))
        score = 1.0 if len(self._window) == 1 or high == low else (value - low) / (high - low)
        floor = int(np.clip(self.max_actors * decay_factor**round_id, self.min_actors, self.max_actors))
        num_actors = int(np.clip(self.max_actors * score, floor, self.max_actors))
        self._window.append(code_ratio)
        signals.update(hessian_ratio=code_ratio, window_value=value, score=score, window_min=low, window_max=high,
                       window_len=float(len(self._window)), decay_factor=decay_factor, floor_actors=float(floor),
                       skipped_probes=float(self._skipped_probes), target_actors=self.max_actors * score)
        return self._finish(num_actors, "authors_code floor" if num_actors == floor else "authors_code score",
                            signals)
