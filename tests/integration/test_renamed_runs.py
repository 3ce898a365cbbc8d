"""A run directory written before the workflows took their folders' names (``train.workflow: async`` and an
``async_workflow:`` section in its config.yaml and in every checkpoint's manifest) still resumes and evaluates, and
resuming it reports no config change (config/renamed.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from nimbus.data.checkpoint import load_checkpoint
from nimbus.errors import CheckpointError
from nimbus.report.metrics import read_metrics
from nimbus.roles.evaluate import evaluate_checkpoint
from nimbus.run.loop import train

INLINE = "runtime.backend=inline"


def _write_old_names(*, run_dir: Path, workflow: str = "async") -> None:
    """Rewrite the run's saved configs as a run written before the rename saved them (the manifests' file digests
    cover the weights and optimizer, not the saved config)."""
    text = (run_dir / "config.yaml").read_text()
    text = text.replace("  workflow: offpolicy\n", f"  workflow: {workflow}\n").replace("\noffpolicy:\n",
                                                                                        "\nasync_workflow:\n")
    assert f"workflow: {workflow}\n" in text and "\nasync_workflow:\n" in text
    (run_dir / "config.yaml").write_text(text)
    for manifest in sorted((run_dir / "checkpoints").glob("ckpt-*/manifest.json")):
        saved = json.loads(manifest.read_text())
        config = saved["config"]
        config["train"]["workflow"] = workflow
        saved["config"] = {("async_workflow" if key == "offpolicy" else key): value for key, value in config.items()}
        manifest.write_text(json.dumps(saved))


def test_a_run_saved_with_the_old_names_resumes_and_evaluates(make_shipped_config, tmp_path: Path, run_cli,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    first = train(config=make_shipped_config("dqn-cartpole", ["train.max_rounds=2", "train.checkpoint_every_rounds=2",
                                                              INLINE]), run_dir=tmp_path / "run")
    _write_old_names(run_dir=first.run_dir)
    assert load_checkpoint(path=first.run_dir).config["async_workflow"]["lockstep"] is False
    with caplog.at_level(logging.WARNING):
        code, said = run_cli("train", "--resume", str(first.run_dir), "--set", "train.max_rounds=3")
    assert code == 0, said
    assert [row["round"] for row in read_metrics(path=first.run_dir / "metrics.jsonl")] == [0, 1, 2]
    changed = [m for m in caplog.messages if "differs from the checkpoint's" in m]
    assert changed and changed[0].endswith(": train.max_rounds: 2 → 3"), changed   # not the renamed keys
    assert [m for m in caplog.messages if "train.workflow: async is now offpolicy" in m]
    assert "workflow: offpolicy\n" in (first.run_dir / "config.yaml").read_text()   # saved again, new names
    assert len(evaluate_checkpoint(path=first.run_dir, episodes=1).returns) == 1
    _write_old_names(run_dir=first.run_dir)
    assert len(evaluate_checkpoint(path=first.run_dir, episodes=1).returns) == 1


def test_a_policy_of_an_old_multiagent_run_is_still_refused_alone(make_shipped_config, tmp_path: Path) -> None:
    """``nimbus eval CKPT`` on one policy of a MARLess run says to evaluate the run directory, whichever name the
    run's config gives the workflow."""
    first = train(config=make_shipped_config("dqn-cartpole", ["train.max_rounds=1", INLINE]), run_dir=tmp_path / "run")
    _write_old_names(run_dir=first.run_dir, workflow="multiagent")
    with pytest.raises(CheckpointError, match="one policy of a multi-agent run"):
        evaluate_checkpoint(path=first.run_dir, episodes=1)
