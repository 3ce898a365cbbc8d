"""Per-round panels of ``report.png`` for the actor-scaling controllers (Nitro, paper 002 §5).

Each function draws one matplotlib axis from the rows of ``metrics.jsonl``; a run without the signal
gets an axis that says so, so every report has the same layout.

* :func:`plot_ratio_and_score`: Nitro's convexity ratio R = −λmax/λmin of each round's probe (left
  axis) and the boosting score S it produced (right axis, 0..1); a round whose R is not defined (NaN,
  the scaler skipped it) has no marker.
* :func:`plot_cost_per_round`: serverless cost of each round (difference of the ledger's cumulative
  ``cost_usd``; round 0's bar also holds the pre-warm's cold starts), with the cumulative cost on a
  second axis and the budget, if any, as a line.
"""

from __future__ import annotations

import math
from typing import Any


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(r["round"], r["extras"][key]) for r in rows if _finite(r.get("extras", {}).get(key))]
    return ([p[0] for p in points], [p[1] for p in points]) if points else ([], [])


def titled(ax: Any, *, title: str, has_data: bool, empty: str) -> bool:
    """Title a panel; one without data says ``empty`` in its middle instead, so every report keeps its layout.
    Returns ``has_data``: whether there is anything to draw."""
    ax.set_title(title, fontsize=10)
    if not has_data:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="gray")
    return has_data


def lead_series(ax: Any, rows: list[dict[str, Any]], *, key: str, color: str, label: str, title: str,
                empty: str) -> bool:
    """A per-round panel led by the series ``key``, drawn as a line with markers (a round without a finite value
    has none), or the ``empty`` note when no round has one. Whether it drew."""
    rounds, values = series(rows, key)
    ax.set_xlabel("round")
    if not titled(ax, title=title, has_data=bool(rounds), empty=empty):
        return False
    ax.plot(rounds, values, "o-", ms=3, lw=1, color=color, label=label)
    return True


def plot_ratio_and_score(ax: Any, rows: list[dict[str, Any]]) -> None:
    """R per round (left) and the boosting score S (right); a note when the run had no Hessian probe."""
    if not lead_series(ax, rows, key="hessian_ratio", color="tab:purple", label="R = −λmax/λmin",
                       title="Nitro: convexity ratio R and boosting score S",
                       empty="no Hessian probe in this run (actors.scaling.kind is not nitro)"):
        return
    ax.set_ylabel("R", color="tab:purple")
    score_rounds, scores = series(rows, "score")
    if score_rounds:
        twin = ax.twinx()
        twin.plot(score_rounds, scores, "s-", ms=3, color="tab:orange", lw=1, label="score S")
        twin.set_ylim(-0.05, 1.05)
        twin.set_ylabel("S", color="tab:orange")


def plot_staleness(ax: Any, rows: list[dict[str, Any]]) -> None:
    """Stellaris: mean and max staleness per round, the threshold β_k, and gradients refused (right axis)."""
    if not lead_series(ax, rows, key="staleness/mean", color="tab:blue", label="mean staleness",
                       title="Stellaris: gradient staleness", empty="no asynchronous learners in this run"):
        return
    ax.plot(*series(rows, "staleness/max"), lw=1, color="tab:cyan", label="max staleness")
    ax.plot(*series(rows, "staleness/threshold"), "--", lw=1, color="tab:red", label="threshold β_k")
    ax.set_ylabel("versions")
    ax.legend(fontsize=8, loc="upper left")
    twin = ax.twinx()
    twin.bar(*series(rows, "staleness/rejected"), color="tab:gray", alpha=0.3)
    twin.set_ylabel("gradients refused", color="tab:gray")


def plot_cost_per_round(ax: Any, rows: list[dict[str, Any]], budget_usd: float | None = None) -> None:
    """Bars of each round's cost (from the ledger's cumulative ``cost_usd``) and the cumulative line."""
    ax.set_xlabel("round")
    if not titled(ax, title="cost per round (serverless, ledger)", has_data=bool(rows), empty="no rounds"):
        return
    rounds = [r["round"] for r in rows]
    cumulative = [float(r["cost_usd"]) for r in rows]
    per_round = [cumulative[0]] + [b - a for a, b in zip(cumulative, cumulative[1:])]
    ax.bar(rounds, per_round, color="tab:green", width=0.8)
    ax.annotate("incl. pre-warm", (rounds[0], per_round[0]), fontsize=7, color="gray", ha="left", va="top")
    ax.set_ylabel("USD per round")
    twin = ax.twinx()
    twin.plot(rounds, cumulative, color="black", lw=1, label="cumulative")
    if budget_usd is not None:
        twin.axhline(budget_usd, color="tab:red", ls="--", lw=1, label="budget")
    twin.set_ylabel("USD so far")
    twin.legend(loc="upper left", fontsize=8)


def scaling_budget(*, config: dict[str, Any]) -> float | None:
    """``actors.scaling.budget_usd`` of a saved ``config.yaml`` (None when the scaler has no budget)."""
    scaling = ((config.get("actors") or {}).get("scaling") or {})
    budget = scaling.get("budget_usd")
    return float(budget) if budget is not None else None
