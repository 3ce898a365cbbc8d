"""A run directory belongs to one ``nimbus train`` at a time and is never reused as a new run (#28.4); torn
JSON-lines files (a killed driver, a full disk) are skipped by readers and cut before a resume appends (#28.6).
Tiny step counts, inline (runtime/inline.py): the subject is the run directory, which the driver writes whatever
backend computes the rounds; a forked pool cost each run ~3 s of start-up. The commands run in this process
(nimbus.cli.main, tests/conftest.py's ``run_cli``: no interpreter and torch to start, ~5 s a command) except the
holder of a run directory in use, which must be another process."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nimbus.cli import main
from nimbus.data import checkpoint as ckpt_mod
from nimbus.data.checkpoint import Checkpointer
from nimbus.errors import CheckpointError
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[2]
QUIET = ["--set", "output.status_line=false", "--set", "train.eval_episodes=0", "--set", "output.report=false",
         "--set", "runtime.backend=inline"]


def _digests(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four rounds of CartPole (256 env steps a round), a checkpoint every 2."""
    run_dir = tmp_path_factory.mktemp("rundir") / "run"
    assert main(["train", str(REPO / "configs" / "ppo-cartpole.yaml"), "--run-dir", str(run_dir), *QUIET,
                 "--set", "train.total_env_steps=1024", "--set", "train.target_return=null",
                 "--set", "train.checkpoint_every_rounds=2"]) == 0
    return run_dir


def _rounds(run_dir: Path) -> list[int]:
    return [json.loads(line)["round"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_second_train_of_a_run_directory_in_use_exits_2_naming_the_holder(base_run: Path, tmp_path: Path,
                                                                            run_cli) -> None:
    """The holder is another process; the refused trains run in this one (tests/conftest.py's run_cli)."""
    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)
    first = subprocess.Popen([sys.executable, "-m", "nimbus.cli", "train", "--resume", str(run_dir), *QUIET,
                              "--set", "train.total_env_steps=10000000"], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(_rounds(run_dir)) < 6:   # the first is training: it holds the lock
            assert first.poll() is None, first.communicate()[1][-3000:]
            time.sleep(0.2)
        assert len(_rounds(run_dir)) >= 6
        code, said = run_cli("train", "--resume", str(run_dir), *QUIET, "--set", "train.total_env_steps=10000000")
        assert code == 2, said[-3000:]
        assert f"is in use by another nimbus process (pid {first.pid})" in said
        code, said = run_cli("train", str(REPO / "configs" / "ppo-cartpole.yaml"), "--run-dir", str(run_dir), *QUIET)
        assert code == 2 and f"pid {first.pid}" in said, said[-3000:]
    finally:
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr[-3000:]
    rounds = _rounds(run_dir)
    assert rounds == list(range(len(rounds)))   # one writer: no round twice, none interleaved
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2   # the first run's and the one resume's


def test_a_run_directory_holding_a_run_is_never_reused_as_a_new_run(base_run: Path, tmp_path: Path, run_cli) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)
    before = _digests(run_dir)
    code, message = run_cli("train", str(REPO / "configs" / "ppo-cartpole.yaml"), "--run-dir", str(run_dir), *QUIET,
                            "--set", "train.total_env_steps=512")
    assert code == 2, message[-3000:]
    assert f"{run_dir} already holds a run" in message and f"nimbus train --resume {run_dir}" in message
    assert _digests(run_dir) == before   # metrics, ledger, config.yaml and checkpoints untouched
    other = tmp_path / "other"
    shutil.copytree(base_run, other)    # --resume into another directory that holds a run: refused the same way
    code, message = run_cli("train", "--resume", str(run_dir), "--run-dir", str(other), *QUIET)
    assert code == 2 and f"{other} already holds a run" in message, message[-3000:]
    (tmp_path / "empty").mkdir()         # an empty directory is a new run's
    code, said = run_cli("train", "--resume", str(run_dir), "--run-dir", str(tmp_path / "empty"), *QUIET,
                         "--set", "train.total_env_steps=1280")
    assert code == 0, said[-3000:]
    assert _rounds(tmp_path / "empty") == [4]


def test_torn_last_lines_are_skipped_by_report_and_cut_by_resume(base_run: Path, tmp_path: Path, run_cli,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A driver killed mid-write (or a full disk) leaves a row without its end: ``nimbus report`` skips it with a
    warning, ``--resume`` cuts it before appending (with a warning) and its new rows parse."""
    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)
    for name in ("metrics.jsonl", "ledger.jsonl"):
        with open(run_dir / name, "a") as handle:
            handle.write('{"round": 4, "env_steps": 12')
    with caplog.at_level("WARNING"):   # the console script's stderr (logging.basicConfig), pytest's handler here
        code, said = run_cli("report", str(run_dir))
    assert code == 0, said[-3000:]
    assert "metrics.jsonl line 5 is not JSON (a torn last line); skipped" in caplog.text
    assert "ledger.jsonl line" in caplog.text and (run_dir / "report.png").is_file()
    caplog.clear()
    with caplog.at_level("WARNING"):
        code, said = run_cli("train", "--resume", str(run_dir), *QUIET, "--set", "train.total_env_steps=1536",
                             "--set", "output.report=true")
    assert code == 0, said[-3000:]
    assert "metrics.jsonl ended in a torn line" in caplog.text and "ledger.jsonl ended in a torn line" in caplog.text
    assert _rounds(run_dir) == [0, 1, 2, 3, 4, 5]   # every line parses: nothing glued onto the torn row
    for line in (run_dir / "ledger.jsonl").read_text().splitlines():
        json.loads(line)


def test_a_full_disk_at_a_checkpoint_is_one_clear_error_and_keeps_the_previous(
        make_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RELIABILITY.md: disk full while checkpointing → temp file removed, previous checkpoint kept, clear message
    (a CheckpointError: ``nimbus train`` exits 1 with it on one line); the run stops there."""
    real = ckpt_mod._write_file

    def disk_full_from_round_4(*, path: Path, data: bytes) -> str:
        if path.parent.name.startswith(".tmp-ckpt-") and len(list(path.parent.parent.glob("ckpt-*"))) >= 1:
            raise OSError(28, "No space left on device")
        return real(path=path, data=data)

    monkeypatch.setattr(ckpt_mod, "_write_file", disk_full_from_round_4)
    with pytest.raises(CheckpointError) as full:
        train(config=make_config(overrides=["train.max_rounds=6", "train.checkpoint_every_rounds=2",
                                            "runtime.backend=inline"]),
              run_dir=tmp_path / "run")
    checkpoints = tmp_path / "run" / "checkpoints"
    assert str(full.value) == (f"checkpoint of round 4 not written to {checkpoints}: No space left on device "
                               f"(disk full); its temporary files were removed and the previous checkpoint "
                               f"{checkpoints / 'ckpt-000002'} is kept")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["ckpt-000002"]
    assert Checkpointer(directory=checkpoints).load_latest().round == 2
