"""``nimbus compare`` and the Nitro panels of report.png, from hand-made run directories."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml

from nimbus.cli import main
from nimbus.errors import NimbusError
from nimbus.report.compare import compare_runs, comparison_table
from nimbus.report.panels import scaling_budget
from nimbus.report.render import render_report


def _fake_run(root: Path, *, name: str, label: str, final: float, cost: float, nitro: bool) -> Path:
    run_dir = root / label
    run_dir.mkdir(parents=True)
    scaling = {"kind": "nitro", "budget_usd": 0.5} if nitro else {"kind": "fixed", "num_actors": 2}
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"name": name, "actors": {"scaling": scaling}}))
    rows = []
    for k in range(4):
        extras = {"recent_return_mean": final * (k + 1) / 4}
        if nitro:
            extras.update(hessian_ratio=[1.0, float("nan"), 0.5, 2.0][k], score=[0.0, 0.0, 0.9, 0.1][k])
        rows.append({"round": k, "env_steps": 100 * (k + 1), "wall_s": 1.5 * (k + 1), "cost_usd": cost * (k + 1) / 4,
                     "return_mean": final, "num_actors": 2, "num_learners": 1, "extras": extras})
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (run_dir / "summary.json").write_text(json.dumps({"final_return": final, "serverless_cost_usd": cost,
                                                      "rounds": 4, "env_steps": 400, "wall_s": 6.0}))
    (run_dir / "ledger.jsonl").write_text("")
    return run_dir


def test_compare_runs_table_and_figure(tmp_path: Path, figures: list) -> None:
    a = _fake_run(tmp_path, name="nitro", label="nitro-s0", final=200.0, cost=0.004, nitro=True)
    b = _fake_run(tmp_path, name="fixed", label="fixed-s0", final=100.0, cost=0.001, nitro=False)
    rows = compare_runs(run_dirs=[a, b], output=tmp_path / "out" / "compare.png")
    assert plt.imread(tmp_path / "out" / "compare.png").shape == (432, 1440, 4)  # 16 x 4.8 in at 90 dpi
    (fig,) = figures
    assert [ax.get_xlabel() for ax in fig.axes] == ["env steps", "wall time (s)", "cost so far (USD, serverless)"]
    for ax, x_of_round in zip(fig.axes, (lambda k: 100 * (k + 1), lambda k: 1.5 * (k + 1), None)):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert sorted(lines) == ["fixed-s0", "nitro-s0"]  # one curve per run, each the run's moving-mean return
        assert list(lines["nitro-s0"].get_ydata()) == [50.0, 100.0, 150.0, 200.0]
        assert list(lines["fixed-s0"].get_ydata()) == [25.0, 50.0, 75.0, 100.0]
        if x_of_round is not None:
            assert list(lines["nitro-s0"].get_xdata()) == [x_of_round(k) for k in range(4)]
        assert lines["nitro-s0"].get_color() != lines["fixed-s0"].get_color()  # one colour per config name
    assert list(fig.axes[2].get_lines()[0].get_xdata()) == pytest.approx([0.001, 0.002, 0.003, 0.004])
    assert [(r.label, r.name) for r in rows] == [("nitro-s0", "nitro"), ("fixed-s0", "fixed")]
    assert rows[0].return_per_usd == pytest.approx(50_000) and rows[1].return_per_usd == pytest.approx(100_000)
    assert comparison_table(rows=rows).row_count == 2


def test_compare_rejects_an_unfinished_run(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NimbusError, match="not a finished run"):
        compare_runs(run_dirs=[tmp_path / "empty"], output=tmp_path / "x.png")


def test_cli_compare(tmp_path: Path) -> None:
    a = _fake_run(tmp_path, name="nitro", label="a", final=10.0, cost=0.01, nitro=True)
    assert main(["compare", str(a), "--output", str(tmp_path / "c.png")]) == 0
    assert plt.imread(tmp_path / "c.png").shape == (432, 1440, 4)
    assert main(["compare", str(tmp_path / "missing"), "--output", str(tmp_path / "m.png")]) == 1


@pytest.mark.parametrize("nitro", [True, False])
def test_report_has_nitro_panels_with_or_without_a_probe(tmp_path: Path, nitro: bool, figures: list) -> None:
    run_dir = _fake_run(tmp_path, name="r", label="r", final=5.0, cost=0.002, nitro=nitro)
    assert plt.imread(render_report(run_dir=run_dir)).shape == (1080, 1080, 4)  # 12 x 12 in at 90 dpi
    (fig,) = figures
    nitro_panel = next(ax for ax in fig.axes if ax.get_title().startswith("Nitro"))
    if nitro:  # R per round without the NaN round, S on the twin axis
        assert [list(line.get_xdata()) for line in nitro_panel.get_lines()] == [[0, 2, 3]]
        assert list(nitro_panel.get_lines()[0].get_ydata()) == [1.0, 0.5, 2.0]
        twin = next(ax for ax in fig.axes if ax is not nitro_panel and ax.get_ylabel() == "S")
        assert list(twin.get_lines()[0].get_ydata()) == [0.0, 0.0, 0.9, 0.1]
    else:
        assert nitro_panel.get_lines() == [] and "no Hessian probe" in nitro_panel.texts[0].get_text()
    cost_panel = next(ax for ax in fig.axes if ax.get_title().startswith("cost per round"))
    assert [bar.get_height() for bar in cost_panel.patches] == pytest.approx([0.0005] * 4)  # 0.002 over 4 rounds


def test_scaling_budget_from_saved_config() -> None:
    assert scaling_budget(config={"actors": {"scaling": {"kind": "nitro", "budget_usd": 2}}}) == 2.0
    assert scaling_budget(config={"actors": {"scaling": {"kind": "fixed", "num_actors": 2}}}) is None
    assert scaling_budget(config={}) is None


def _seeded_run(root: Path, *, arm: str, seed: int, final: float, env: str = "CartPole-v1", cost: float = 0.002,
                eval_return: float | None = None) -> Path:
    """A finished run of one arm and seed: curves rise linearly to ``final`` over 4 rounds."""
    run_dir = root / f"{arm}-{env}-s{seed}"
    run_dir.mkdir(parents=True)
    config = {"name": arm, "seed": seed, "env": {"id": env}, "actors": {"num_actors": 2 if arm == "small" else 4}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"round": k, "env_steps": 100 * (k + 1), "wall_s": 1.5 * (k + 1) + 0.1 * seed,
             "cost_usd": cost * (k + 1) / 4,
             "return_mean": final, "extras": {"recent_return_mean": final * (k + 1) / 4}} for k in range(4)]
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (run_dir / "summary.json").write_text(json.dumps({"final_return": final, "serverless_cost_usd": cost, "rounds": 4,
                                                      "env_steps": 400, "wall_s": 6.0, "eval_return": eval_return}))
    return run_dir


BIG = [410.0, 455.0, 500.0, 488.0, 302.0]
SMALL = [120.0, 260.0, 90.0, 475.0, 150.0]


def _five_and_five(root: Path) -> list[Path]:
    return [_seeded_run(root, arm=arm, seed=s, final=scores[s]) for arm, scores in (("big", BIG), ("small", SMALL))
            for s in range(5)]


def test_seeds_of_one_config_form_a_group_with_iqm_intervals(tmp_path: Path) -> None:
    from nimbus.analysis.stats import aggregate
    from nimbus.report.compare import group_statistics

    groups, improvements = group_statistics(run_dirs=_five_and_five(tmp_path), score="final_return")
    assert [(g.label, len(g.runs), g.tasks) for g in groups] == [("big", 5, ["CartPole-v1"]),
                                                                ("small", 5, ["CartPole-v1"])]
    big, small = groups
    assert big.iqm.point == pytest.approx((410 + 455 + 488) / 3)       # the middle three of five
    assert small.iqm.point == pytest.approx((120 + 150 + 260) / 3)
    assert big.median.point == 455.0 and big.mean.point == pytest.approx(sum(BIG) / 5)
    assert big.iqm == aggregate(scores_by_task=[np.array(BIG)], statistic="iqm")
    assert big.iqm.low < big.iqm.point < big.iqm.high
    (improvement,) = improvements
    wins = sum(a > b for a in BIG for b in SMALL) + 0.5 * sum(a == b for a in BIG for b in SMALL)
    assert (improvement.better, improvement.worse) == ("big", "small")
    assert improvement.probability.point == pytest.approx(wins / 25)


def test_group_by_name_stratifies_over_envs(tmp_path: Path) -> None:
    from nimbus.report.compare import group_statistics

    runs = [_seeded_run(tmp_path, arm="big", seed=s, final=f, env=env) for env, finals in
            (("CartPole-v1", [400.0, 450.0]), ("Acrobot-v1", [-90.0, -80.0, -85.0])) for s, f in enumerate(finals)]
    by_config, _ = group_statistics(run_dirs=runs, score="final_return")
    by_name, _ = group_statistics(run_dirs=runs, score="final_return", group_by="name")
    assert [len(g.runs) for g in by_config] == [2, 3]
    (group,) = by_name
    assert group.tasks == ["Acrobot-v1", "CartPole-v1"] and len(group.runs) == 5


def test_a_group_is_drawn_as_its_iqm_curve_with_a_band(tmp_path: Path, figures: list) -> None:
    from matplotlib.collections import PolyCollection

    compare_runs(run_dirs=_five_and_five(tmp_path), output=tmp_path / "c.png")
    (fig,) = figures
    steps = fig.axes[0]
    lines = {line.get_label(): line for line in steps.get_lines()}
    assert sorted(lines) == ["big (IQM of 5)", "small (IQM of 5)"]
    # at the last round every run sits at its final score: the curve ends at the IQM of the finals
    assert lines["big (IQM of 5)"].get_ydata()[-1] == pytest.approx((410 + 455 + 488) / 3)
    assert len([c for c in steps.collections if isinstance(c, PolyCollection)]) == 2


def test_cli_compare_prints_the_statistics_and_draws_a_profile(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")     # one table row per line
    from nimbus.analysis.stats import aggregate
    from nimbus.report.compare import format_interval

    runs = _five_and_five(tmp_path)
    assert main(["compare", *map(str, runs), "--output", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    big = next(line for line in out.splitlines() if line.startswith("│ big "))
    assert big.split("│")[-2].strip() == format_interval(aggregate(scores_by_task=[np.array(BIG)], statistic="iqm"))
    assert big.split("│")[-2].strip().startswith("451.00 [")  # the IQM of five with its interval
    assert "P(X > Y)" in out
    assert plt.imread(tmp_path / "c-profile.png").shape[2] == 4
    # the fake runs did not evaluate (the figure goes to tmp_path: the default ./compare.png landed in the repo once)
    assert main(["compare", *map(str, runs), "--score", "eval_return", "--output", str(tmp_path / "e.png")]) == 1


def test_the_profile_counts_runs_above_each_threshold(tmp_path: Path, figures: list) -> None:
    from nimbus.report.compare import group_runs, load_run, plot_profile

    groups = group_runs(runs=[load_run(run_dir=d) for d in _five_and_five(tmp_path)])
    plot_profile(groups=groups, score="final_return", output=tmp_path / "p.png")
    (fig,) = figures
    big = next(line for line in fig.axes[0].get_lines() if line.get_label().startswith("big"))
    thresholds, fractions = big.get_xdata(), big.get_ydata()
    at = int(np.searchsorted(thresholds, 455.0))       # the first threshold ≥ 455: 488 and 500 lie above it
    assert fractions[at] == pytest.approx(2 / 5) and fractions[0] == 1.0   # all of big lie above 90, the lowest
