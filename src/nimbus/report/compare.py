"""``nimbus compare RUN_DIR...``: several runs on one figure, and a table of return, cost, return per dollar.

Inputs per run directory, as ``report.py`` reads them: ``metrics.jsonl`` (rows per round: the moving
mean return, env steps, wall time, cumulative ledger cost), ``summary.json`` (final return, total
serverless cost) and ``config.yaml`` (the run's ``name``: runs of one name — e.g. the seeds of one
ablation arm — share a colour).

Example::

    rows = compare_runs(run_dirs=[Path("runs/nitro-a"), Path("runs/fixed-a")], output=Path("compare.png"))
    rows[0].return_per_usd
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402
from rich.table import Table  # noqa: E402

from nimbus.errors import NimbusError  # noqa: E402
from nimbus.report.metrics import read_metrics  # noqa: E402

X_AXES = (("env_steps", "env steps"), ("wall_s", "wall time (s)"), ("cost_usd", "cost so far (USD, serverless)"))


@dataclass(frozen=True)
class RunComparison:
    """One run's line in the comparison table."""

    label: str                 # the run directory's name
    name: str                  # the config's name (ablation arm)
    rounds: int
    env_steps: int
    wall_s: float
    final_return: float | None     # summary.json's moving mean over the last return_window episodes
    cost_usd: float                # total serverless cost, from the ledger (summary.json)
    return_per_usd: float | None   # final_return / cost_usd


@dataclass(frozen=True)
class _Run:
    comparison: RunComparison
    rows: list[dict[str, Any]]


def load_run(*, run_dir: Path) -> _Run:
    """A run directory's rows and summary line; raises NimbusError when it is not a finished run."""
    run_dir = Path(run_dir)
    missing = [n for n in ("metrics.jsonl", "summary.json") if not (run_dir / n).exists()]
    if missing:
        raise NimbusError(f"{run_dir}: not a finished run directory (missing {', '.join(missing)})")
    rows = read_metrics(path=run_dir / "metrics.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    config_path = run_dir / "config.yaml"
    config = yaml.safe_load(config_path.read_text()) if config_path.exists() else {}
    final, cost = summary.get("final_return"), float(summary.get("serverless_cost_usd") or 0.0)
    per_usd = final / cost if final is not None and cost > 0 else None
    comparison = RunComparison(label=run_dir.name, name=str((config or {}).get("name", run_dir.name)),
                               rounds=int(summary.get("rounds", len(rows))),
                               env_steps=int(summary.get("env_steps", 0)), wall_s=float(summary.get("wall_s", 0.0)),
                               final_return=final, cost_usd=cost, return_per_usd=per_usd)
    return _Run(comparison=comparison, rows=rows)


def _curve(rows: list[dict[str, Any]], x_key: str) -> tuple[list[float], list[float]]:
    points = [(r[x_key], r.get("extras", {}).get("recent_return_mean")) for r in rows]
    points = [(x, y) for x, y in points if isinstance(y, (int, float)) and math.isfinite(y)]
    return [p[0] for p in points], [p[1] for p in points]


def plot_comparison(*, runs: list[_Run], output: Path) -> Path:
    """Return (moving mean) vs env steps, vs wall time and vs cost; one colour per config name."""
    names = list(dict.fromkeys(run.comparison.name for run in runs))
    colours = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(names)}
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for ax, (x_key, x_label) in zip(axes, X_AXES):
        for run in runs:
            xs, ys = _curve(run.rows, x_key)
            ax.plot(xs, ys, lw=1.5, alpha=0.85, color=colours[run.comparison.name], label=run.comparison.label)
        ax.set_xlabel(x_label)
        ax.set_ylabel("episodic return (moving mean)")
    handles = [plt.Line2D([], [], color=colours[name], lw=2) for name in names]
    axes[0].legend(handles, names, fontsize=8, loc="lower right")
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=90)
    plt.close(fig)
    return output


def compare_runs(*, run_dirs: list[Path], output: Path) -> list[RunComparison]:
    """Draw ``output`` (PNG) for the runs and return their table lines, in the order given."""
    if not run_dirs:
        raise NimbusError("compare needs at least one run directory")
    runs = [load_run(run_dir=Path(d)) for d in run_dirs]
    plot_comparison(runs=runs, output=output)
    return [run.comparison for run in runs]


def comparison_table(*, rows: list[RunComparison]) -> Table:
    """The rich table ``nimbus compare`` prints."""
    table = Table(title="nimbus compare", show_header=True)
    for column in ("run", "name", "rounds", "env steps", "wall (s)", "final return", "cost (USD)", "return / USD"):
        table.add_column(column, justify="left" if column in ("run", "name") else "right")
    for row in rows:
        table.add_row(row.label, row.name, f"{row.rounds:,}", f"{row.env_steps:,}", f"{row.wall_s:,.1f}",
                      _fmt(row.final_return, "{:,.2f}"), f"{row.cost_usd:.6f}", _fmt(row.return_per_usd, "{:,.0f}"))
    return table


def _fmt(value: float | None, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)
