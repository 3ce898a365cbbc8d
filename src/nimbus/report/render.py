"""``report.png`` and the summary table of a run, rebuilt from its files alone.

Inputs: ``metrics.jsonl`` (rows per round), ``ledger.jsonl`` (one row per attempt), ``config.yaml``
(for the pricing file) and ``summary.json``. ``nimbus report RUN_DIR`` calls ``render_report``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from nimbus.config.yaml_loader import parse_yaml
from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import load_pricing
from nimbus.report.metrics import read_metrics
from nimbus.report.panels import plot_cost_per_round, plot_ratio_and_score, plot_staleness, scaling_budget
from nimbus.report.techniques import technique_panels


def run_config(*, run_dir: Path) -> dict[str, Any]:
    """The run's config.yaml as data, through the configs' guarded loader ({} when it has none)."""
    path = Path(run_dir) / "config.yaml"
    data = parse_yaml(text=path.read_text(), source=str(path)) if path.exists() else None
    return data if isinstance(data, dict) else {}


def time_label(*, config: dict[str, Any]) -> str:
    """A run on the simulated backend counts simulated seconds (docs/simulated.md), not the command's wall time."""
    simulated = (config.get("runtime") or {}).get("backend") == "simulated"
    return "simulated time (s)" if simulated else "wall time (s)"


def cost_by_kind(*, run_dir: Path, config: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Dollars per function kind from the run's ledger, priced by ``config``'s pricing file: as billed, and without
    cold starts and provisioned idle time (cost/pricing.py). The ledger and the pricing file are read once."""
    pricing_path = (config.get("cost") or {}).get("pricing_path")
    pricing = load_pricing(path=Path(pricing_path) if pricing_path else None)
    records = Ledger.load(path=run_dir / "ledger.jsonl")
    return (pricing.cost_breakdown(records=records, excl_cold=False),
            pricing.cost_breakdown(records=records, excl_cold=True))


def _plot_cost_by_kind(ax: Any, *, costs: dict[str, float], warm: dict[str, float]) -> None:
    """Each kind's bill beside its bill without cold starts and provisioned idle time."""
    kinds = sorted(costs)
    at = list(range(len(kinds)))
    ax.bar([x - 0.2 for x in at], [costs[k] for k in kinds], width=0.4, color="tab:green", label="billed")
    ax.bar([x + 0.2 for x in at], [warm.get(k, 0.0) for k in kinds], width=0.4, color="tab:olive",
           label="excl. cold starts and provisioned idle")
    ax.set_xticks(at, kinds)
    ax.set_ylabel("cost (USD, serverless)")
    ax.set_title("cost by function kind", fontsize=10)
    ax.legend(fontsize=8)


def _plot_returns(ax: Any, rows: list[dict[str, Any]], x_key: str, label: str) -> None:
    points = [(r[x_key], r["return_mean"]) for r in rows if r["return_mean"] is not None]
    if points:
        xs, ys = zip(*points)
        ax.plot(xs, ys, lw=1, alpha=0.5, label="round mean")
    smooth = [(r[x_key], r["extras"].get("recent_return_mean")) for r in rows]
    smooth = [(x, y) for x, y in smooth if y is not None and y == y]
    if smooth:
        xs, ys = zip(*smooth)
        ax.plot(xs, ys, lw=2, label="moving mean")
    ax.set_xlabel(label)
    ax.set_ylabel("episodic return")
    ax.legend(loc="lower right", fontsize=8)


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported when a figure is drawn: ``nimbus train`` imports this module
    for its summary table, and matplotlib (~0.5 s) has no place on the way to round 0 (tests/integration/
    test_startup_path.py)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def render_report(*, run_dir: Path) -> Path:
    """Write ``report.png`` into the run directory and return its path."""
    run_dir = Path(run_dir)
    rows = read_metrics(path=run_dir / "metrics.jsonl")
    config = run_config(run_dir=run_dir)
    costs, warm_costs = cost_by_kind(run_dir=run_dir, config=config)
    panels = technique_panels(rows=rows)   # a technique's own panels (MARLess: a fourth row), report/techniques.py
    extra_rows = panels.EXTRA_ROWS if panels is not None else 0
    plt = _pyplot()
    fig, axes = plt.subplots(3 + extra_rows, 2, figsize=(12, 12 + 4 * extra_rows))
    _plot_returns(axes[0, 0], rows, "env_steps", "env steps")
    _plot_returns(axes[0, 1], rows, "wall_s", time_label(config=config))
    rounds = [r["round"] for r in rows]
    axes[1, 0].step(rounds, [r["num_actors"] for r in rows], where="post", label="actors")
    axes[1, 0].step(rounds, [r["num_learners"] for r in rows], where="post", label="learners")
    axes[1, 0].set_xlabel("round")
    axes[1, 0].set_ylabel("functions")
    axes[1, 0].legend(fontsize=8)
    _plot_cost_by_kind(axes[1, 1], costs=costs, warm=warm_costs)
    if panels is not None:
        panels.draw(axes=axes, rows=rows, run_dir=run_dir)
    elif any("staleness/mean" in r.get("extras", {}) for r in rows):   # Stellaris runs: the staleness panel
        plot_staleness(axes[2, 0], rows)
    else:
        plot_ratio_and_score(axes[2, 0], rows)
    budget = scaling_budget(config=config)
    plot_cost_per_round(axes[2, 1], rows, budget_usd=budget)
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    path = run_dir / "report.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def summary_table(*, run_dir: Path) -> Table:
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    table = Table(title=f"nimbus run {Path(run_dir).name}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")

    def fmt(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float):
            return f"{value:,.6f}" if abs(value) < 1 else f"{value:,.2f}"
        return f"{value:,}" if isinstance(value, int) else str(value)

    labels = {"final_return": "final return (moving mean)", "eval_return": "evaluation return",
              "env_steps": "env steps", "episodes": "episodes", "rounds": "rounds",
              "wall_s": time_label(config=run_config(run_dir=Path(run_dir))),
              "invocations": "invocations", "attempts": "attempts", "cold_starts": "cold starts",
              "retries": "retries", "serverless_cost_usd": "serverless cost (USD)",
              "serverless_cost_excl_cold_usd": "serverless cost excl. cold starts and provisioned idle (USD)",
              "serverful_cost_usd": "serverful cost, same run (USD)", "stopped_by": "stopped by"}
    for key, label in labels.items():
        table.add_row(label, fmt(summary.get(key)))
    return table


def print_summary(*, run_dir: Path, console: Console | None = None) -> None:
    (console or Console()).print(summary_table(run_dir=run_dir))
