"""``--resume`` at the edges: a finished run trains nothing and says so; a run resumed from a checkpoint older
than its last metrics rows (a SIGKILL between checkpoints) writes each round once; the summary after a resume
counts the whole run's invocations, as its rounds, cost and wall time are."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger
from nimbus.data.checkpoint import load_checkpoint
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train

INLINE = "runtime.backend=inline"


@pytest.fixture
def inline_config(make_config):
    return lambda *overrides: make_config(overrides=[*overrides, INLINE, "train.eval_episodes=0"])


def _rounds(run_dir: Path) -> list[int]:
    return [row["round"] for row in read_metrics(path=run_dir / "metrics.jsonl")]


def test_resuming_a_finished_run_trains_nothing_and_says_so(inline_config, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    config = inline_config("train.max_rounds=3", "train.checkpoint_every_rounds=3")
    first = train(config=config, run_dir=tmp_path / "run")
    ledger_rows = len(Ledger.load(path=first.run_dir / "ledger.jsonl"))
    with caplog.at_level(logging.WARNING):
        again = train(config=config, resume_from=first.run_dir)
    assert again.rows == [] and again.summary == first.summary
    assert _rounds(first.run_dir) == [0, 1, 2]
    assert load_checkpoint(path=first.run_dir).round == 3
    assert len(Ledger.load(path=first.run_dir / "ledger.jsonl")) == ledger_rows   # nothing was invoked
    assert "nothing to train" in caplog.text and "max_rounds" in caplog.text


def test_a_resume_from_an_older_checkpoint_writes_each_round_once(inline_config, tmp_path: Path) -> None:
    """Killed after round 4 with its checkpoint at round 3: rounds 3 and 4 run again and appear once each."""
    first = train(config=inline_config("train.max_rounds=5", "train.checkpoint_every_rounds=3"),
                  run_dir=tmp_path / "run")
    checkpoints = sorted((first.run_dir / "checkpoints").glob("ckpt-*"))
    for newer in checkpoints[1:]:           # as if killed before the final checkpoint
        shutil.rmtree(newer)
    (first.run_dir / "summary.json").unlink()
    assert load_checkpoint(path=first.run_dir).round == 3 and _rounds(first.run_dir) == [0, 1, 2, 3, 4]
    resumed = train(config=inline_config("train.max_rounds=5", "train.checkpoint_every_rounds=3"),
                    resume_from=first.run_dir)
    assert [row.round for row in resumed.rows] == [3, 4]
    assert _rounds(first.run_dir) == [0, 1, 2, 3, 4]


def test_the_summary_after_a_resume_counts_the_whole_run(inline_config, tmp_path: Path) -> None:
    first = train(config=inline_config("train.max_rounds=2", "train.checkpoint_every_rounds=2"),
                  run_dir=tmp_path / "run")
    resumed = train(config=inline_config("train.max_rounds=4", "train.checkpoint_every_rounds=2"),
                    resume_from=first.run_dir)
    records = [r for r in Ledger.load(path=first.run_dir / "ledger.jsonl") if r.outcome != "prewarm"]
    assert resumed.summary.rounds == 4
    assert resumed.summary.invocations == sum(r.attempt == 1 for r in records) > first.summary.invocations
    assert resumed.summary.attempts == len(records)


def test_a_population_resumed_from_older_checkpoints_writes_each_round_once(make_config, tmp_path: Path) -> None:
    """PBT: each member's metrics after its checkpoint are cut before those rounds run again."""
    from tests.integration.test_pbt import PBT

    two = [o.replace("members: 4", "members: 2") for o in PBT if not o.startswith("train.max_rounds")]
    two += [INLINE, "train.checkpoint_every_rounds=2", "train.eval_episodes=0"]
    first = train(config=make_config(overrides=two + ["train.max_rounds=3"]))
    for member in ("member0", "member1"):
        member_dir = first.run_dir / "policies" / member
        for newer in sorted((member_dir / "checkpoints").glob("ckpt-*"))[1:]:   # as if killed after round 3
            shutil.rmtree(newer)
        assert load_checkpoint(path=member_dir).round == 2 and _rounds(member_dir) == [0, 1, 2]
    train(config=make_config(overrides=two + ["train.max_rounds=3"]), resume_from=first.run_dir)
    for member in ("member0", "member1"):
        assert _rounds(first.run_dir / "policies" / member) == [0, 1, 2]


def test_resuming_a_finished_population_trains_nothing_and_says_so(make_config, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """PBT: every member already at max_rounds; the resume invokes nothing, writes no round, keeps the summary."""
    from tests.integration.test_pbt import PBT

    two = [o.replace("members: 4", "members: 2") for o in PBT if not o.startswith("train.max_rounds")]
    two += [INLINE, "train.eval_episodes=0", "train.max_rounds=2"]
    first = train(config=make_config(overrides=two))
    ledger_rows = len(Ledger.load(path=first.run_dir / "ledger.jsonl"))
    summary = (first.run_dir / "summary.json").read_text()
    with caplog.at_level(logging.WARNING):
        again = train(config=make_config(overrides=two), resume_from=first.run_dir)
    assert again.summary == first.summary and (first.run_dir / "summary.json").read_text() == summary
    for member in ("member0", "member1"):
        assert _rounds(first.run_dir / "policies" / member) == [0, 1]
    assert len(Ledger.load(path=first.run_dir / "ledger.jsonl")) == ledger_rows   # nothing was invoked
    assert "nothing to train" in caplog.text and "--set train.max_rounds=4" in caplog.text
