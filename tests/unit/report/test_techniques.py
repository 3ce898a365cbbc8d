"""A technique's panels of report.png are found by name (report/techniques.py): report/ imports no technique folder."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402

from nimbus.report.render import render_report  # noqa: E402
from nimbus.report.techniques import TECHNIQUE_PANELS, technique_panels  # noqa: E402


def test_every_named_technique_module_draws_panels() -> None:
    for module in TECHNIQUE_PANELS.values():
        panels = importlib.import_module(module)
        assert panels.EXTRA_ROWS >= 0 and callable(panels.applies) and callable(panels.draw)


def test_only_a_multiagent_run_gets_the_marless_panels() -> None:
    assert technique_panels(rows=[{"round": 0, "extras": {"marless/policies": 2}}]).__name__ == "nimbus.marless.report"
    assert technique_panels(rows=[{"round": 0, "extras": {"staleness/mean": 1.0}}]) is None


def _marless_run(root: Path) -> Path:
    (root / "config.yaml").write_text(yaml.safe_dump({"name": "m", "actors": {"scaling": {"kind": "fixed"}}}))
    rows = [{"round": k, "env_steps": 100 * (k + 1), "wall_s": 1.0 + k, "cost_usd": 0.001 * (k + 1),
             "return_mean": -20.0, "num_actors": 2, "num_learners": 1,
             "extras": {"marless/policies": 2, "marless/return/agent_0": -20.0, "marless/global_return": -20.0,
                        "marless/learner_cost_usd": 0.001, "marless/actor_cost_usd": 0.0005}} for k in range(3)]
    (root / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (root / "marless.jsonl").write_text("\n".join(json.dumps(
        {"round": k, "agent_policy": {"agent_0": "p0"}, "actors": 2, "policies": ["p0"]}) for k in range(3)) + "\n")
    (root / "ledger.jsonl").write_text("")
    return root


def test_a_multiagent_report_has_a_fourth_row_of_marless_panels(tmp_path: Path, figures: list) -> None:
    assert plt.imread(render_report(run_dir=_marless_run(tmp_path))).shape == (1440, 1080, 4)  # 12 x 16 in at 90 dpi
    (fig,) = figures
    titles = [ax.get_title() for ax in fig.axes]
    assert sum(t.startswith("MARLess") for t in titles) == 3 and any(t.startswith("cost per round") for t in titles)
