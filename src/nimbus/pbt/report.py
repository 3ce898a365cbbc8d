"""``report.png`` of a run with several policies: one return curve per member, PBT's exploit events and
member failures marked, and each member's hyperparameters over env steps. Rebuilt from the run's files
(``policies/<name>/metrics.jsonl``, ``lineage.jsonl``, ``hyperparameters.jsonl``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nimbus.data.jsonl import read_jsonl  # noqa: E402
from nimbus.report.metrics import read_metrics  # noqa: E402


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [row for row in read_jsonl(path=path) if isinstance(row, dict)] if path.exists() else []


def render_population(*, run_dir: Path) -> Path:
    members = sorted(p.name for p in (run_dir / "policies").iterdir() if (p / "metrics.jsonl").exists())
    lineage = _jsonl(run_dir / "lineage.jsonl")
    hyper = _jsonl(run_dir / "hyperparameters.jsonl")
    fig, (ax_ret, ax_hyp) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    for name in members:
        rows = [r for r in read_metrics(path=run_dir / "policies" / name / "metrics.jsonl")
                if r.get("return_mean") is not None]
        by_round = {r["round"]: r for r in rows}
        line, = ax_ret.plot([r["env_steps"] for r in rows], [r["return_mean"] for r in rows], label=name)
        for event in (e for e in lineage if e["member"] == name and e["round"] in by_round):
            row = by_round[event["round"]]
            marker = "v" if event["event"] == "exploit" else "x"
            ax_ret.plot(row["env_steps"], row["return_mean"], marker, color=line.get_color(), markersize=9)
        points = [h for h in hyper if h["member"] == name and h["hyperparameters"]]
        if points:
            key = sorted(points[0]["hyperparameters"])[0]
            ax_hyp.plot([h["env_steps"] for h in points], [h["hyperparameters"][key] for h in points],
                        color=line.get_color(), label=f"{name} {key}")
    ax_ret.set_ylabel("episodic return (▼ exploit, × failure)")
    ax_ret.legend(loc="best", fontsize=8)
    keys = sorted({key for h in hyper for key in h["hyperparameters"]})
    ax_hyp.set_ylabel(f"algo.{keys[0]}" if keys else "hyperparameter")
    ax_hyp.set_yscale("log")
    ax_hyp.set_xlabel("env steps")
    fig.tight_layout()
    path = run_dir / "report.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
