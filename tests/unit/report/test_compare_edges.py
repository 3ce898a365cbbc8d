"""``nimbus compare`` at its edges: P(X > Y) only between groups on the same envs; a group's IQM curve only over
the x range every run covers; a corrupt summary.json or config.yaml exits 2 naming the file (the config through
the guarded YAML loader); at 80 columns no run name is cut."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from nimbus.errors import ConfigError
from nimbus.report.compare import _group_curve, compare_runs, comparison_table, group_statistics, load_run
from tests.unit.report.test_compare import _seeded_run


def test_no_probability_of_improvement_between_groups_on_different_envs(tmp_path: Path) -> None:
    runs = [_seeded_run(tmp_path, arm="big", seed=s, final=400.0 + s) for s in range(3)]
    runs += [_seeded_run(tmp_path, arm="small", seed=s, final=100.0 + s, env="Acrobot-v1") for s in range(3)]
    groups, improvements = group_statistics(run_dirs=runs, score="final_return")
    assert len(groups) == 2 and improvements == []
    same = [_seeded_run(tmp_path / "same", arm=arm, seed=s, final=f + s) for arm, f in (("big", 400.0),
                                                                                       ("small", 100.0))
            for s in range(3)]
    assert len(group_statistics(run_dirs=same, score="final_return")[1]) == 1


def test_a_groups_curve_covers_only_the_range_every_run_reaches(tmp_path: Path) -> None:
    short = load_run(run_dir=_seeded_run(tmp_path, arm="a", seed=0, final=100.0))
    long = load_run(run_dir=_seeded_run(tmp_path, arm="a", seed=1, final=100.0))
    long.rows.extend({"round": k, "env_steps": 100 * (k + 1), "wall_s": 1.5 * (k + 1),
                      "extras": {"recent_return_mean": 200.0}} for k in range(4, 8))
    late = load_run(run_dir=_seeded_run(tmp_path, arm="a", seed=2, final=100.0))
    del late.rows[0]
    grid, point, low, high = _group_curve([short, long, late], "env_steps")
    assert grid[0] == 200 and grid[-1] == 400            # the latest start, the earliest end
    assert np.all(point <= 100.0)                         # no point from the long run's extra rounds


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"final_return": "high"}'])
def test_a_corrupt_summary_is_a_config_error_naming_it(tmp_path: Path, text: str, run_cli) -> None:
    run = _seeded_run(tmp_path, arm="a", seed=0, final=1.0)
    (run / "summary.json").write_text(text)
    with pytest.raises(ConfigError, match="summary.json"):
        load_run(run_dir=run)
    code, said = run_cli("compare", str(run), "--output", str(tmp_path / "c.png"))
    assert code == 2 and "summary.json" in said.replace(" ", "") and "Traceback" not in said, said


def test_a_self_expanding_config_is_refused_at_once(tmp_path: Path, run_cli) -> None:
    run = _seeded_run(tmp_path, arm="a", seed=0, final=1.0)
    (run / "config.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")))
    code, said = run_cli("compare", str(run), "--output", str(tmp_path / "c.png"))
    assert code == 2 and "expands to more than" in said, said


def test_run_names_are_whole_at_80_columns(tmp_path: Path) -> None:
    run = _seeded_run(tmp_path, arm="ppo-cartpole-long-arm-name", seed=0, final=1.0)
    rows = compare_runs(run_dirs=[run], output=tmp_path / "c.png")
    console = Console(width=80, record=True)
    console.print(comparison_table(rows=rows))
    text = console.export_text()
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["run", "name"])
    name_at = lines[header].index("name")
    assert "".join(line[:name_at].strip() for line in lines[header + 2:]) == run.name


def test_nimbus_envs_cuts_nothing_at_80_columns(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, said = run_cli("envs")
    assert code == 0 and "…" not in said and "classic_c" in said and "ontrol" in said, said
