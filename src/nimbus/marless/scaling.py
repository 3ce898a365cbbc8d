"""MARLess's cost-aware actor scaling (MARLess §4.4, Eq. 1-2): how many actor functions the next round uses.

Per active policy j, a window of its last W convexity ratios C (Nitro's −e_max/e_min, probed by its policy
function after each update):

    S_j = clip((C_max − C_t − Z·σ) / (C_max − C_min), 0, 1)   over policy j's window (a lower C: more data helps)
    I_j = clip(S_j · I_max, I_min, I_max)
    I_threshold = β (I_max − I_min),  I_avg = mean_j I_j
    actors = max_j I_j   if I_avg ≥ I_threshold   else I_avg        (rounded half up)

The paper's S is (C_max − C_t) / (C_max − C_min): a min-max position, which stretches a window of pure probe noise
over [0, 1] (C_max of ten noisy probes sits ~1.5 σ above their mean, so C_max − C_t > 0 almost always), and the
clip's dead zone S < I_min / I_max, meant to "ignore minor fluctuations" (§4.4), then ignores almost nothing:
noise alone asked for ~80 % of I_max. nimbus measures the drop in the probe's noise, as the sharing detector
measures its slope (docs/marless.md): σ is the round-to-round noise of C over the window before its newest
probe (std of successive differences / √2, so a steady trend cancels and a sudden drop in C_t does not inflate
it), and the first Z = ``DEAD_ZONE_SDS`` = 2 σ below the window's best are the dead zone. A real fall of C far
beyond its noise gives S ≈ the paper's; noise alone gives S ≈ 0.

No evidence gives I_min: a policy whose window has fewer than four finite values (σ needs three before the
newest), no spread, or whose newest probe failed (NaN). The first rounds use I_min for the same reason. ``fixed``
always uses ``actors.scaling``'s count (the ablation's "no scaling" arm).
"""

from __future__ import annotations

import math
from typing import Any

from nimbus.marless.sharing import round_noise

DEAD_ZONE_SDS = 2.0
"""Z: how many noise standard deviations below the window's best C count as noise (module docstring)."""


def scaling_ratio(*, window: list[float]) -> float | None:
    """S for the newest value of ``window``; None without evidence (module docstring)."""
    finite = [c for c in window if math.isfinite(c)]
    if not window or not math.isfinite(window[-1]) or len(finite) < 4 or len(set(finite)) < 2:
        return None
    high, low = max(finite), min(finite)
    noise = round_noise(finite[:-1])
    return min(1.0, max(0.0, (high - window[-1] - DEAD_ZONE_SDS * noise) / (high - low)))


def round_half_up(value: float) -> int:
    return int(math.floor(value + 0.5))


def actor_count(*, per_policy: list[int], i_min: int, i_max: int, beta: float) -> int:
    """The round's actors from the per-policy counts I_j (max when their mean reaches β(I_max − I_min))."""
    if not per_policy:
        return i_min
    mean = sum(per_policy) / len(per_policy)
    threshold = beta * (i_max - i_min)
    return max(per_policy) if mean >= threshold else round_half_up(mean)


class MarlessActorScaler:
    """``fixed`` or ``marless`` (module docstring)."""

    def __init__(self, *, config: Any, num_agents: int, fixed_actors: int) -> None:
        self.mode, self.fixed_actors = config.scaling, fixed_actors
        self.i_max = config.i_max
        self.i_min = config.i_min if config.i_min is not None else max(1, round_half_up(config.i_max / num_agents))
        self.beta, self.window_size = config.beta, config.scaling_window
        self.windows: dict[str, list[float]] = {}
        self.per_policy: dict[str, int] = {}

    @property
    def needs_convexity(self) -> bool:
        return self.mode == "marless"

    def initial(self) -> int:
        return self.fixed_actors if self.mode == "fixed" else self.i_min

    def observe(self, *, convexity: dict[str, float]) -> None:
        """One round's C per active policy; policies no longer active drop their windows."""
        self.windows = {policy: (self.windows.get(policy, []) + [float(value)])[-self.window_size:]
                        for policy, value in convexity.items()}

    def policy_actors(self, *, policy: str) -> int:
        ratio = scaling_ratio(window=self.windows.get(policy, []))
        if ratio is None:
            return self.i_min
        return min(self.i_max, max(self.i_min, round_half_up(ratio * self.i_max)))

    def decide(self) -> int:
        if self.mode == "fixed":
            return self.fixed_actors
        self.per_policy = {policy: self.policy_actors(policy=policy) for policy in self.windows}
        return actor_count(per_policy=list(self.per_policy.values()), i_min=self.i_min, i_max=self.i_max,
                           beta=self.beta)

    def state_dict(self) -> dict[str, Any]:
        """The convexity windows and last per-policy counts (JSON: a checkpoint's manifest)."""
        return {"windows": {p: [None if math.isnan(v) else v for v in w] for p, w in self.windows.items()},
                "per_policy": dict(self.per_policy)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.windows = {policy: [math.nan if v is None else float(v) for v in window]
                        for policy, window in state["windows"].items()}
        self.per_policy = {policy: int(count) for policy, count in state["per_policy"].items()}

    def state(self) -> dict[str, float]:
        out = {"i_min": float(self.i_min), "i_max": float(self.i_max)}
        out.update({f"actors/{policy}": float(count) for policy, count in self.per_policy.items()})
        return out
