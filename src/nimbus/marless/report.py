"""The MARLess panels of ``report.png`` (``train.workflow: marless``), drawn from ``metrics.jsonl`` and
``marless.jsonl`` (the agent→policy map of every round).

* :func:`plot_agent_returns`: each agent's mean episode return per round and the global return (their mean).
* :func:`plot_policy_map`: which policy every agent used in every round (a colour per policy), with the
  number of policies and of actors per round on a second axis.
* :func:`plot_marless_costs`: learner cost and actor cost of each round (from the ledger, by function kind).

``report/render.py`` finds this module by name (report/techniques.py): ``applies`` and ``draw`` below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nimbus.data.jsonl import read_jsonl
from nimbus.report.panels import series, titled

EXTRA_ROWS = 1   # a fourth row of panels: the policy map and the cost by function kind


def is_marless(rows: list[dict[str, Any]]) -> bool:
    return any("marless/policies" in r.get("extras", {}) for r in rows)


def applies(*, rows: list[dict[str, Any]]) -> bool:
    """A multi-agent run's rows (report/techniques.py)."""
    return is_marless(rows)


def draw(*, axes: Any, rows: list[dict[str, Any]], run_dir: Path) -> None:
    """The MARLess panels in the third and fourth rows of ``report.png`` (the cost per round stays at [2, 1])."""
    plot_agent_returns(axes[2, 0], rows)
    plot_policy_map(axes[3, 0], read_maps(run_dir=run_dir))
    plot_marless_costs(axes[3, 1], rows)


def read_maps(*, run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "marless.jsonl"
    return [row for row in read_jsonl(path=path) if isinstance(row, dict)] if path.exists() else []


def plot_agent_returns(ax: Any, rows: list[dict[str, Any]]) -> None:
    agents = sorted({k.split("/", 2)[2] for r in rows for k in r.get("extras", {}) if k.startswith("marless/return/")})
    if not titled(ax, title="MARLess: return per agent and global", has_data=bool(agents),
                  empty="no finished episodes"):
        return
    for agent in agents:
        ax.plot(*series(rows, f"marless/return/{agent}"), lw=1, alpha=0.6, label=agent)
    ax.plot(*series(rows, "marless/global_return"), lw=2, color="black", label="global")
    ax.set_xlabel("round")
    ax.set_ylabel("episode return")
    ax.legend(fontsize=7, ncol=2)


def plot_policy_map(ax: Any, maps: list[dict[str, Any]]) -> None:
    if not titled(ax, title="MARLess: agent → policy per round (colour = policy); policies, actors",
                  has_data=bool(maps), empty="no marless.jsonl"):
        return
    agents = sorted(maps[0]["agent_policy"])
    policies = sorted({p for m in maps for p in m["agent_policy"].values()})
    grid = np.array([[policies.index(m["agent_policy"][a]) for m in maps] for a in agents], dtype=float)
    rounds = [m["round"] for m in maps]
    ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="tab20",
              extent=(rounds[0] - 0.5, rounds[-1] + 0.5, len(agents) - 0.5, -0.5))
    ax.set_yticks(range(len(agents)), agents, fontsize=7)
    ax.set_xlabel("round")
    twin = ax.twinx()
    twin.step(rounds, [len(m["policies"]) for m in maps], where="mid", color="white", lw=2, label="policies")
    twin.step(rounds, [m["actors"] for m in maps], where="mid", color="tab:red", lw=1, label="actors")
    twin.set_ylabel("policies / actors")
    twin.legend(fontsize=7, loc="upper right")


def plot_marless_costs(ax: Any, rows: list[dict[str, Any]]) -> None:
    rounds, learner = series(rows, "marless/learner_cost_usd")
    if not titled(ax, title="MARLess: cost per round by function kind", has_data=bool(rounds), empty="no cost rows"):
        return
    ax.plot(rounds, learner, lw=1, label="learner functions (policy, critic, postprocess)")
    ax.plot(*series(rows, "marless/actor_cost_usd"), lw=1, label="actor functions")
    ax.set_xlabel("round")
    ax.set_ylabel("USD (serverless)")
    ax.legend(fontsize=7)
