"""One metrics API: a row per round → metrics.jsonl and the live status line.

The experiment trackers (TensorBoard, W&B, MLflow: ``output.loggers``, report/trackers.py) get the same row from the
run loop right after it is written here (run/rounds.py), under the usual names with env steps as the x-axis:
``charts/episodic_return``, ``losses/policy_loss``, ``runtime/cold_starts``, ``cost/usd``, ``time/round_s``.

Example::

    sink = MetricsSink(run_dir=run_dir, status_line=True)
    sink.write(row=round_metrics, runtime={"cold_starts": 2})
    sink.close()
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from nimbus.data.jsonl import read_jsonl
from nimbus.types import RoundMetrics

log = logging.getLogger(__name__)


def read_metrics(*, path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl file (used by the report and by tests); a torn last line is skipped with a warning."""
    return [row for row in read_jsonl(path=path) if isinstance(row, dict)]


class MetricsSink:
    def __init__(self, *, run_dir: Path, status_line: bool) -> None:
        self._file = open(Path(run_dir) / "metrics.jsonl", "a", buffering=1)
        self._console = Console(stderr=True) if status_line else None
        self._interactive = status_line and sys.stderr.isatty()

    def write(self, *, row: RoundMetrics, runtime: dict[str, float]) -> None:
        record = asdict(row) | {"runtime": runtime}
        self._file.write(json.dumps(record) + "\n")
        if self._console is not None:
            self._status(row=row)

    def _status(self, *, row: RoundMetrics) -> None:
        ret = "   n/a" if row.return_mean is None else f"{row.return_mean:7.1f}"
        line = (f"round {row.round:5d} | steps {row.env_steps:9,d} | return {ret} | actors {row.num_actors:3d} | "
                f"{row.env_steps / max(row.wall_s, 1e-9):8,.0f} steps/s | ${row.cost_usd:.5f}")
        if "staleness/mean" in row.extras:   # Stellaris: learners and staleness
            line += (f" | learners {row.num_learners} | staleness {row.extras['staleness/mean']:.2f} "
                     f"(max {row.extras['staleness/max']:.0f}) | refused {row.extras['staleness/rejected']:.0f}")
        if "eval/return_mean" in row.extras:   # train.eval_every_env_steps (run/periodic_eval.py)
            line += f" | eval {row.extras['eval/return_mean']:.1f}"
        if self._interactive:
            self._console.print(line, end="\r", highlight=False, soft_wrap=True)
        elif row.round % 10 == 0:
            self._console.print(line, highlight=False)

    def close(self) -> None:
        if self._interactive and self._console is not None:
            self._console.print()
        self._file.close()
