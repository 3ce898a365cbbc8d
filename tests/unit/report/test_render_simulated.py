"""A simulated run's summary says "simulated time": its seconds are the simulation's, not the command's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from nimbus.report.render import summary_table


@pytest.mark.parametrize(("backend", "label"), [("simulated", "simulated time (s)"), ("local", "wall time (s)")])
def test_the_summary_names_the_clock_it_counts(tmp_path: Path, backend: str, label: str) -> None:
    (tmp_path / "config.yaml").write_text(f"name: x\nruntime: {{backend: {backend}}}\n")
    (tmp_path / "summary.json").write_text(json.dumps({"wall_s": 191.0, "rounds": 3}))
    console = Console(width=120, record=True)
    console.print(summary_table(run_dir=tmp_path))
    text = console.export_text()
    assert label in text and ("wall time" not in text if backend == "simulated" else "simulated" not in text)
