"""One simulated attempt's duration, straggling and death, drawn from its kind's DurationModel (config/simulation.py).

Every attempt takes exactly three draws from the runtime's generator (a standard normal for the lognormal, two
uniforms for straggling and death), whatever its model says, so changing one fraction does not shift the draws
of every later attempt; attempts draw in simulated-start order, which the seed fixes.

Example::

    rng = np.random.default_rng(0)
    draw = draw_attempt(model=DurationModel(median_s=0.5), rng=rng, rows=256, nbytes=40_000)
    draw.duration_s, draw.straggler, draw.dies
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nimbus.config.simulation import DurationModel
from nimbus.data.codec import Message
from nimbus.errors import ConfigError
from nimbus.types import PROBE_SECONDS_KEY

# The longest simulated cold start, median duration or first-call term: the driver wakes every 0.5 simulated seconds
# while it waits (liveness, status), so a day-long cold start is 170,000 wake-ups before round 0 (and 1e9 s never
# ends). An hour is past any serverless limit (Lambda stops a function at 15 min) and past a real cold start.
MAX_SIMULATED_S = 3600.0
BOUNDED_FIELDS = ("median_s", "cold_start_s", "first_call_s")


def check_bounded(*, models: dict[str, DurationModel], default: DurationModel) -> None:
    """Every model's seconds within ``MAX_SIMULATED_S``; ConfigError (exit 2) naming the kind and the field, its
    value printed readably (``1e+300``, not three hundred digits)."""
    for kind, model in {"default": default, **models}.items():
        for name in BOUNDED_FIELDS:
            value = float(getattr(model, name))
            if not value <= MAX_SIMULATED_S:
                where = f"simulation.default.{name}" if kind == "default" else \
                    f"simulation.functions.{kind}.{name} (or simulation.profile's {kind})"
                raise ConfigError(f"{where}: {value:.4g} s is longer than a simulated duration may be "
                                  f"(at most {MAX_SIMULATED_S:,.0f} s)")


@dataclass(frozen=True)
class Draw:
    """An attempt's simulated fate: its duration (compute, straggling, first-call and byte terms), the transfer part
    of it, whether it straggled, and whether it dies (then ``dies_after_s`` into it, a uniform share)."""

    duration_s: float
    transfer_s: float
    straggler: bool
    dies: bool
    dies_after_s: float


def draw_attempt(*, model: DurationModel, rng: np.random.Generator, rows: int, nbytes: int,
                 first_call: bool = False) -> Draw:
    """The duration of one attempt over ``rows`` rows and ``nbytes`` bytes (config/simulation.py's formula);
    ``first_call``: the worker's first attempt (``first_call_s`` is added)."""
    z, u_straggle, u_die = float(rng.standard_normal()), float(rng.random()), float(rng.random())
    compute = (model.median_s + model.per_row_s * rows) * \
        (math.exp(model.sigma * z) if model.distribution == "lognormal" else 1.0)
    straggler = u_straggle < model.straggler_fraction
    if straggler:
        compute *= model.straggler_factor
    transfer = nbytes / model.bandwidth_bytes_per_s if model.bandwidth_bytes_per_s else 0.0
    duration = compute + (model.first_call_s if first_call else 0.0) + transfer
    dies = u_die < model.failure_fraction
    # the death point reuses u_die, rescaled to [0, 1): a dying attempt is uniform over its duration
    after = duration * (u_die / model.failure_fraction) if dies else duration
    return Draw(duration_s=duration, transfer_s=transfer, straggler=straggler, dies=dies, dies_after_s=after)


def rows_of(*messages: Message | None) -> int:
    """The largest leading dimension of the messages' arrays (an actor's fragment, a learner's batch indices)."""
    rows = 0
    for message in messages:
        if message is None:
            continue
        for array in message.arrays.values():
            if getattr(array, "ndim", 0) > 0:
                rows = max(rows, int(array.shape[0]))
    return rows


def simulated_timings(*, header: dict[str, Any], duration_s: float, transfer_s: float,
                      parts: dict[str, float] | None = None) -> None:
    """Replace a result header's own timings (top-level numbers named ``*_s``, and those in ``extras``) by simulated
    seconds, so a row built from them is the simulation's and repeats bitwise: ``transfer_s`` becomes the
    simulated transfer, a key of ``parts`` its own simulated seconds (``probe_s``: :func:`with_probe`), every other
    ``*_s`` the attempt's whole simulated duration (sampling_s, env_s, inference_s, learning_s, compute_s...)."""
    parts = {"transfer_s": transfer_s, **(parts or {})}
    for table in (header, header.get("extras")):
        if not isinstance(table, dict):
            continue
        for key, value in list(table.items()):
            if key.endswith("_s") and isinstance(value, (int, float)) and not isinstance(value, bool):
                table[key] = parts.get(key, duration_s)


def with_probe(*, draw: Draw, model: DurationModel | None, rng: np.random.Generator,
               result: Message | None) -> tuple[Draw, dict[str, float]]:
    """A result that reports ``probe_s`` (Nitro's Hessian probe, run inside the learner call after its update): with
    a ``probe`` model (``model``; None when neither ``simulation.functions`` nor the profile names the kind), the
    probe's seconds are drawn from it (three more draws, after the attempt's) and added to the attempt's duration,
    and ``probe_s`` reports them; the learner's model then times the update alone. Else the draw is unchanged and
    ``probe_s`` is the whole duration, as every other part."""
    extras = result.header.get("extras") if result is not None else None
    if model is None or result is None or (PROBE_SECONDS_KEY not in result.header and
                                           not (isinstance(extras, dict) and PROBE_SECONDS_KEY in extras)):
        return draw, {}
    probe_s = draw_attempt(model=model, rng=rng, rows=0, nbytes=0).duration_s
    total = draw.duration_s + probe_s
    return Draw(duration_s=total, transfer_s=draw.transfer_s, straggler=draw.straggler, dies=draw.dies,
                dies_after_s=draw.dies_after_s if draw.dies else total), {PROBE_SECONDS_KEY: probe_s}
