"""Stellaris's workflow always progresses (issue 26 item 6) and resumes its rule (item 8), on real runs.

A NaN gradient (``NIMBUS_FAULTS`` action ``nan``) under ``sync`` used to hang the run forever: the non-finite
branch never told the rule, and ``sync`` caps launches per version. A parameter function that refuses every
gradient of an aggregation stalled it the same way. Each run here must finish its rounds within the test's
timeout (pytest-timeout interrupts a hang).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.runtime.faults import FAULTS_ENV, read_counter

TASKS = 16   # configs/stellaris-cartpole.yaml: 4 epochs × 4 minibatches a round


def _arm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, point: str, after: int) -> Path:
    counter = tmp_path / f"{point}.counter"
    monkeypatch.setenv(FAULTS_ENV, json.dumps({point: {"action": "nan", "counter_path": str(counter),
                                                       "after": after, "times": 1}}))
    return counter


@pytest.mark.timeout(100)
def test_sync_with_a_nan_gradient_finishes_its_rounds(make_shipped_config, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails without the workflow telling the rule (rule.lost): sync waits for a third gradient of the version
    that no learner may be launched to compute, and the run never writes a row."""
    counter = _arm(monkeypatch, tmp_path, point="gradient.nonfinite", after=4)
    config = make_shipped_config("stellaris-cartpole", overrides=["stellaris.rule=sync", "train.max_rounds=3",
                                                                  "runtime.backend=inline"])
    result = train(config=config)
    assert read_counter(path=counter) == 5     # the fault fired once
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert len(rows) >= 3
    extras = [row["extras"] for row in rows]
    assert sum(e["staleness/rejected"] for e in extras) >= 1              # the NaN gradient, counted
    assert sum(e["staleness/refused_nonfinite"] for e in extras) == 1
    assert all(e["staleness/admitted"] + e["staleness/rejected"] == TASKS for e in extras)
    assert rows[-1]["policy_version"] > 0
    for e in extras:   # the round's metrics: every gradient the rule saw is in the histogram; sync aggregates 3
        counts = sum(value for key, value in e.items() if key.startswith("staleness/count_"))
        assert counts == TASKS - e["staleness/refused_nonfinite"]
        assert e["staleness/count_0"] == counts - e["staleness/refused_rule"]   # sync applies only fresh ones
        assert 2.5 <= e["staleness/gradients_per_aggregation"] <= 3.0 + 1e-9
        assert 0 < 3 * e["staleness/learners_in_flight_share"] <= e["staleness/learners_in_flight_max"] <= 3


@pytest.mark.timeout(100)
def test_sync_with_one_learner_survives_a_parameter_call_that_refuses_every_gradient(
        make_shipped_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One learner: the poisoned gradient is a whole aggregation, the parameter function publishes nothing. Fails
    without rule.unpublished: sync's one launch of the version is spent and nothing can be launched again."""
    counter = _arm(monkeypatch, tmp_path, point="gradient.poisoned", after=3)
    config = make_shipped_config("stellaris-cartpole", overrides=["stellaris.rule=sync", "stellaris.learners=1",
                                                                  "train.max_rounds=2", "runtime.backend=inline"])
    result = train(config=config)
    assert read_counter(path=counter) == 4
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert len(rows) >= 2
    assert sum(row["extras"]["staleness/rejected"] for row in rows) == 1
    assert all(row["extras"]["staleness/admitted"] + row["extras"]["staleness/rejected"] == TASKS for row in rows)
    assert rows[1]["policy_version"] == 2 * TASKS - 1     # every gradient but the refused one made a version


def test_a_resumed_run_continues_the_rules_beta_instead_of_measuring_delta_max_again(
        make_shipped_config, tmp_path: Path) -> None:
    """δmax and the rule's round come back from the checkpoint (issue 26 item 8): β_k of the resumed rows is the
    saved δmax · d^k. Fails without the rule's state in the checkpoint: the resumed run spends its first two
    rounds without a threshold (warm-up and measurement; NaN in the rows) and re-measures δmax."""
    overrides = ["runtime.backend=inline", "stellaris.decay=0.9", "train.checkpoint_every_rounds=100"]
    first = train(config=make_shipped_config("stellaris-cartpole", overrides=[*overrides, "train.max_rounds=4"]))
    manifest = sorted((first.run_dir / "checkpoints").glob("ckpt-*/manifest.json"))[-1]
    saved = json.loads(manifest.read_text())["extra"]["stellaris_rule"]
    assert saved["rule"] == "stellaris" and saved["seed"] is not None and saved["seed"] >= 1
    resumed = train(config=make_shipped_config("stellaris-cartpole", overrides=[*overrides, "train.max_rounds=7"]),
                    resume_from=first.run_dir)
    assert [row.round for row in resumed.rows][:1] == [first.summary.rounds]
    for row in resumed.rows:   # rounds overlap: the rule may already be in the round after the row's
        threshold = row.extras["staleness/threshold"]
        assert threshold == pytest.approx(saved["seed"] * 0.9 ** row.round) or \
            threshold == pytest.approx(saved["seed"] * 0.9 ** (row.round + 1)), (row.round, threshold, saved)
