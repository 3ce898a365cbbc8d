"""``nimbus report`` shows both bills: the summary table's two serverless figures and, per function kind, the billed
bar beside the bar without cold starts (from a hand-made run directory with one cold actor attempt)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from nimbus.cost.ledger import LedgerRecord
from nimbus.report.render import render_report, summary_table

LAMBDA = 0.0000166667


def _run_dir(root: Path) -> Path:
    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"name": "x"}))
    cold = LedgerRecord(invocation_id="i", attempt=1, function="actor", kind="actor", worker_id="w", cold=True,
                        init_s=1.0, queued_at=0.0, start_at=0.0, end_at=3.0, duration_s=3.0, billed_s=4.0, cpus=1.0,
                        gpus=0.0, memory_mb=1024, outcome="ok")
    (run_dir / "ledger.jsonl").write_text(json.dumps(asdict(cold)) + "\n")
    (run_dir / "metrics.jsonl").write_text(json.dumps(
        {"round": 0, "env_steps": 100, "wall_s": 4.0, "cost_usd": 4 * LAMBDA, "return_mean": 10.0, "num_actors": 1,
         "num_learners": 1, "extras": {"recent_return_mean": 10.0, "cost_excl_cold_usd": 3 * LAMBDA}}) + "\n")
    (run_dir / "summary.json").write_text(json.dumps({"serverless_cost_usd": 4 * LAMBDA,
                                                      "serverless_cost_excl_cold_usd": 3 * LAMBDA}))
    return run_dir


def test_the_report_shows_the_bill_with_and_without_cold_starts(tmp_path: Path, figures: list) -> None:
    run_dir = _run_dir(tmp_path)
    render_report(run_dir=run_dir)
    (fig,) = figures
    bars = [(bar.get_label(), [p.get_height() for p in bar.patches]) for bar in fig.axes[3].containers]
    assert [label for label, _ in bars] == ["billed", "excl. cold starts and provisioned idle"]
    assert bars[0][1] == [pytest.approx(4 * LAMBDA)] and bars[1][1] == [pytest.approx(3 * LAMBDA)]
    console = Console(width=200, record=True)
    console.print(summary_table(run_dir=run_dir))
    text = console.export_text()
    assert "serverless cost excl. cold starts and provisioned idle (USD)" in text and "0.000050" in text
