"""The progress watchdog acts in the real workflow (issue 26 item 6): a rule that forgets a lost gradient (here
``sync`` with ``unpublished`` and ``lost`` made no-ops, the fake) would wait forever for a launch it never
re-opens; the workflow sees nothing in flight, nothing to offer, no parameter function running and tasks that
no slot may launch, and calls ``rule.stalled()``. Fails without the watchdog: the run hangs (pytest-timeout)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from nimbus.config import load_config
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.runtime.faults import FAULTS_ENV, read_counter
from nimbus.stellaris.rules import SyncRule

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "stellaris-cartpole.yaml"


@pytest.mark.timeout(100)
def test_the_watchdog_unblocks_a_rule_that_forgets_a_refused_aggregation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(SyncRule, "unpublished", lambda self, *, aggregation: None)
    monkeypatch.setattr(SyncRule, "lost", lambda self, *, arrival, reason: None)
    counter = tmp_path / "counter"
    monkeypatch.setenv(FAULTS_ENV, json.dumps({"gradient.poisoned": {"action": "nan", "counter_path": str(counter),
                                                                     "after": 3, "times": 1}}))
    config = load_config(path=CONFIG, overrides=[
        "stellaris.rule=sync", "stellaris.learners=1", "train.max_rounds=2", "runtime.backend=inline",
        f"output.root_dir={tmp_path}", "output.loggers=[]", "output.report=false",
        "output.status_line=false", "train.eval_episodes=0"])
    with caplog.at_level(logging.WARNING, logger="nimbus.stellaris.workflow"):
        result = train(config=config)
    assert read_counter(path=counter) == 4
    assert sum("watchdog" in record.getMessage() for record in caplog.records) == 1
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert len(rows) >= 2 and rows[1]["policy_version"] == 31   # 32 tasks, one refused by the parameter function
