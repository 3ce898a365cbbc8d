"""``nimbus compare RUN_DIR...``: several runs on one figure, a table of return, cost, return per dollar, and
statistics across seeds.

Inputs per run directory, as ``report.py`` reads them: ``metrics.jsonl`` (rows per round: the moving
mean return, env steps, wall time, cumulative ledger cost), ``summary.json`` (final return, total
serverless cost) and ``config.yaml`` (the run's ``name``: runs of one name — e.g. the seeds of one
ablation arm — share a colour).

Runs are grouped by their config without ``seed`` (the seeds of one arm), or by ``name`` (an arm across
envs; each env is a task of the stratified bootstrap). A group of several runs is drawn as its IQM curve with
a 95 % bootstrap band, and gets mean, median and IQM with 95 % stratified bootstrap intervals, and the
probability that its runs beat another group's (analysis/stats.py). A performance profile (the fraction of
runs above each score) goes beside the figure.

Example::

    rows = compare_runs(run_dirs=[Path("runs/nitro-a"), Path("runs/fixed-a")], output=Path("compare.png"))
    rows[0].return_per_usd
    groups = group_statistics(run_dirs=run_dirs, score="final_return")   # GroupStatistics per arm
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich import box  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from nimbus.analysis.stats import Interval, aggregate, band, performance_profile, probability_of_improvement  # noqa: E402
from nimbus.config.yaml_loader import parse_yaml  # noqa: E402
from nimbus.errors import ConfigError, NimbusError  # noqa: E402
from nimbus.report.metrics import read_metrics  # noqa: E402

X_AXES = (("env_steps", "env steps"), ("wall_s", "wall time (s)"), ("cost_usd", "cost so far (USD, serverless)"))
Score = Literal["final_return", "eval_return", "return_per_usd"]
GroupBy = Literal["config", "name"]
CURVE_POINTS = 50


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
    eval_return: float | None = None   # summary.json's evaluation of the final policy, when the run evaluated
    cost_excl_cold_usd: float | None = None   # the cost without cold starts and provisioned idle (None: older run)


@dataclass(frozen=True)
class _Run:
    comparison: RunComparison
    rows: list[dict[str, Any]]
    config: dict[str, Any]


@dataclass(frozen=True)
class GroupStatistics:
    """One group's (arm's) statistics across its runs, for one score."""

    label: str
    runs: list[str]            # run directory names
    tasks: list[str]           # env ids (strata of the bootstrap)
    mean: Interval
    median: Interval
    iqm: Interval


@dataclass(frozen=True)
class Improvement:
    """P(a run of ``better`` beats a run of ``worse``), with its bootstrap interval."""

    better: str
    worse: str
    probability: Interval


def load_run(*, run_dir: Path) -> _Run:
    """A run directory's rows and summary line; raises NimbusError when it is not a finished run."""
    run_dir = Path(run_dir)
    missing = [n for n in ("metrics.jsonl", "summary.json") if not (run_dir / n).exists()]
    if missing:
        raise NimbusError(f"{run_dir}: not a finished run directory (missing {', '.join(missing)})")
    rows = read_metrics(path=run_dir / "metrics.jsonl")
    summary = _read_summary(path=run_dir / "summary.json")
    config_path = run_dir / "config.yaml"
    config = parse_yaml(text=config_path.read_text(), source=str(config_path)) if config_path.exists() else None
    config = config if isinstance(config, dict) else {}
    try:
        final, cost = _number(summary.get("final_return")), float(summary.get("serverless_cost_usd") or 0.0)
        per_usd = final / cost if final is not None and cost > 0 else None
        comparison = RunComparison(label=run_dir.name, name=str(config.get("name", run_dir.name)),
                                   rounds=int(summary.get("rounds", len(rows))),
                                   env_steps=int(summary.get("env_steps", 0)),
                                   wall_s=float(summary.get("wall_s", 0.0)), final_return=final, cost_usd=cost,
                                   return_per_usd=per_usd, eval_return=_number(summary.get("eval_return")),
                                   cost_excl_cold_usd=_number(summary.get("serverless_cost_excl_cold_usd")))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{run_dir / 'summary.json'}: a field is not a number ({exc})") from None
    return _Run(comparison=comparison, rows=rows, config=config)


def _read_summary(*, path: Path) -> dict[str, Any]:
    """summary.json as a mapping; ConfigError (exit 2, naming the file) when it is not one."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc}); a run cut short, or not a nimbus summary") from None
    if not isinstance(summary, dict):
        raise ConfigError(f"{path}: not a run summary (a JSON object)")
    return summary


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _curve(rows: list[dict[str, Any]], x_key: str) -> tuple[list[float], list[float]]:
    points = [(r[x_key], r.get("extras", {}).get("recent_return_mean")) for r in rows]
    points = [(x, y) for x, y in points if isinstance(y, (int, float)) and math.isfinite(y)]
    return [p[0] for p in points], [p[1] for p in points]


def group_runs(*, runs: list[_Run], by: GroupBy = "config") -> dict[str, list[_Run]]:
    """Runs of one arm together, in the order first seen: same config but the seed, or the same ``name``."""
    keys: dict[str, str] = {}
    groups: dict[str, list[_Run]] = {}
    for run in runs:
        key = run.comparison.name if by == "name" else json.dumps(
            {k: v for k, v in run.config.items() if k != "seed"}, sort_keys=True, default=str)
        if key not in keys:
            label = run.comparison.name
            keys[key] = label if label not in keys.values() else f"{label} ({len(keys) + 1})"
        groups.setdefault(keys[key], []).append(run)
    return groups


def _task(run: _Run) -> str:
    return str((run.config.get("env") or {}).get("id", "?"))


def _scores_by_task(runs: list[_Run], score: Score) -> dict[str, np.ndarray]:
    by_task: dict[str, list[float]] = {}
    for run in runs:
        value = getattr(run.comparison, score)
        if value is None:
            raise NimbusError(f"{run.comparison.label}: summary.json has no {score}; pick another --score")
        by_task.setdefault(_task(run), []).append(float(value))
    return {task: np.asarray(values) for task, values in by_task.items()}


def statistics_of(*, groups: dict[str, list[_Run]], score: Score, seed: int = 0
                  ) -> tuple[list[GroupStatistics], list[Improvement]]:
    """Mean, median and IQM per group with stratified bootstrap intervals; P(X > Y) for every pair on the same
    tasks (the earlier group given as X)."""
    scores = {label: _scores_by_task(runs, score) for label, runs in groups.items()}
    table = [GroupStatistics(label=label, runs=[r.comparison.label for r in groups[label]], tasks=sorted(by_task),
                             **{s: aggregate(scores_by_task=[by_task[t] for t in sorted(by_task)], statistic=s,
                                             seed=seed) for s in ("mean", "median", "iqm")})
             for label, by_task in scores.items()]
    labels = list(scores)
    pairs = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:] if sorted(scores[a]) == sorted(scores[b])]
    improvements = [Improvement(better=a, worse=b, probability=probability_of_improvement(
        x_by_task=[scores[a][t] for t in sorted(scores[a])], y_by_task=[scores[b][t] for t in sorted(scores[b])],
        seed=seed)) for a, b in pairs]
    return table, improvements


def _group_curve(runs: list[_Run], x_key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The group's IQM curve and band on a grid over the x range every run covers (None if they share none)."""
    curves = [_curve(run.rows, x_key) for run in runs]
    if any(len(xs) == 0 for xs, _ in curves):
        return None
    start, end = max(xs[0] for xs, _ in curves), min(xs[-1] for xs, _ in curves)
    if not end > start:
        return None
    grid = np.linspace(start, end, CURVE_POINTS)
    values = np.stack([np.interp(grid, xs, ys) for xs, ys in curves], axis=-1)
    point, low, high = band(runs_by_point=values)
    return grid, point, low, high


def plot_comparison(*, runs: list[_Run], output: Path, groups: dict[str, list[_Run]] | None = None) -> Path:
    """Return (moving mean) vs env steps, vs wall time and vs cost; one colour per config name. A group of several
    runs is one IQM curve with its 95 % bootstrap band; a run alone is its own curve."""
    groups = groups if groups is not None else {run.comparison.label: [run] for run in runs}
    names = list(dict.fromkeys(run.comparison.name for run in runs))
    colours = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(names)}
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for ax, (x_key, x_label) in zip(axes, X_AXES):
        for label, members in groups.items():
            colour = colours[members[0].comparison.name]
            curve = _group_curve(members, x_key) if len(members) > 1 else None
            if curve is not None:
                grid, point, low, high = curve
                ax.plot(grid, point, lw=2, color=colour, label=f"{label} (IQM of {len(members)})")
                ax.fill_between(grid, low, high, color=colour, alpha=0.2, lw=0)
                continue
            for run in members:
                xs, ys = _curve(run.rows, x_key)
                ax.plot(xs, ys, lw=1.5, alpha=0.85, color=colour, label=run.comparison.label)
        ax.set_xlabel(x_label)
        ax.set_ylabel("episodic return (moving mean)")
    handles = [plt.Line2D([], [], color=colours[name], lw=2) for name in names]
    axes[0].legend(handles, names, fontsize=8, loc="lower right")
    return _save(fig, output)


def plot_profile(*, groups: dict[str, list[_Run]], score: Score, output: Path) -> Path:
    """Performance profiles: the fraction of each group's runs whose score exceeds each threshold."""
    values = {label: np.concatenate(list(_scores_by_task(runs, score).values())) for label, runs in groups.items()}
    everything = np.concatenate(list(values.values()))
    thresholds = np.linspace(everything.min(), everything.max(), 200)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for i, (label, scores) in enumerate(values.items()):
        ax.step(thresholds, performance_profile(scores=scores, thresholds=thresholds), where="post",
                color=plt.get_cmap("tab10")(i % 10), label=f"{label} ({scores.size} runs)")
    ax.set_xlabel(f"{score} threshold τ")
    ax.set_ylabel("fraction of runs with score > τ")
    ax.legend(fontsize=8)
    return _save(fig, output)


def _save(fig: Any, output: Path) -> Path:
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=90)
    plt.close(fig)
    return output


def profile_path(*, output: Path) -> Path:
    """Where the performance profile goes: beside the comparison figure."""
    return Path(output).with_name(f"{Path(output).stem}-profile.png")


def compare_runs(*, run_dirs: list[Path], output: Path, group_by: GroupBy = "config") -> list[RunComparison]:
    """Draw ``output`` (PNG) for the runs and return their table lines, in the order given."""
    if not run_dirs:
        raise NimbusError("compare needs at least one run directory")
    runs = [load_run(run_dir=Path(d)) for d in run_dirs]
    plot_comparison(runs=runs, output=output, groups=group_runs(runs=runs, by=group_by))
    return [run.comparison for run in runs]


def group_statistics(*, run_dirs: list[Path], score: Score = "final_return", group_by: GroupBy = "config",
                     profile: Path | None = None, seed: int = 0) -> tuple[list[GroupStatistics], list[Improvement]]:
    """The statistics across seeds ``nimbus compare`` prints; draws the performance profile when ``profile``."""
    groups = group_runs(runs=[load_run(run_dir=Path(d)) for d in run_dirs], by=group_by)
    if profile is not None:
        plot_profile(groups=groups, score=score, output=profile)
    return statistics_of(groups=groups, score=score, seed=seed)


def comparison_table(*, rows: list[RunComparison]) -> Table:
    """The rich table ``nimbus compare`` prints."""
    # nine columns do not fit 80: a light box, and every cell folds onto more lines instead of being cut ("ppo-c…")
    table = Table(title="nimbus compare", show_header=True, box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("run", "name", "rounds", "env steps", "wall (s)", "final return", "cost (USD)",
                   "cost excl. cold (USD)", "return / USD"):
        table.add_column(column, justify="left" if column in ("run", "name") else "right", overflow="fold")
    for row in rows:
        table.add_row(escape(row.label), escape(row.name), f"{row.rounds:,}", f"{row.env_steps:,}",
                      f"{row.wall_s:,.1f}", _fmt(row.final_return, "{:,.2f}"), f"{row.cost_usd:.6f}",
                      _fmt(row.cost_excl_cold_usd, "{:.6f}"), _fmt(row.return_per_usd, "{:,.0f}"))
    return table


def statistics_table(*, groups: list[GroupStatistics], score: Score) -> Table:
    """Mean, median and IQM of ``score`` per group, each with its 95 % stratified bootstrap interval."""
    table = Table(title=f"{score} across seeds (95 % stratified bootstrap intervals)", show_header=True)
    for column in ("group", "runs", "tasks", "mean", "median", "IQM"):
        table.add_column(column, justify="left" if column in ("group", "tasks") else "right",
                         overflow="fold" if column in ("group", "tasks") else "ellipsis")
    for group in groups:
        table.add_row(escape(group.label), str(len(group.runs)), escape(", ".join(group.tasks)),
                      *(format_interval(i) for i in (group.mean, group.median, group.iqm)))
    return table


def improvement_table(*, improvements: list[Improvement]) -> Table:
    """P(X > Y) between groups on the same tasks."""
    table = Table(title="probability of improvement P(X > Y)", show_header=True)
    for column in ("X", "Y", "P(X > Y)"):
        table.add_column(column, justify="right" if column.startswith("P") else "left",
                         overflow="ellipsis" if column.startswith("P") else "fold")
    for row in improvements:
        table.add_row(escape(row.better), escape(row.worse), format_interval(row.probability, pattern="{:.2f}"))
    return table


def format_interval(interval: Interval, *, pattern: str = "{:,.2f}") -> str:
    """``point [low, high]``; the point alone when one run gives no interval."""
    point = pattern.format(interval.point)
    if interval.low is None or interval.high is None:
        return point
    return f"{point} [{pattern.format(interval.low)}, {pattern.format(interval.high)}]"


def _fmt(value: float | None, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)
