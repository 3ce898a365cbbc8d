"""A whole run under the retry taxonomy (runtime/faults.py): an env whose own code raises stops the run at the
first attempt with that traceback summarised and exit 1; an injected fault in the same place is retried (P1)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from nimbus.cli import main

REPO = Path(__file__).resolve().parents[2]
QUIET = ["output.loggers=[]", "output.report=false", "output.status_line=false", "train.eval_episodes=0",
         "train.max_rounds=3"]


def train_cli(tmp_path: Path, *overrides: str) -> int:
    sets = [arg for o in [*QUIET, f"output.root_dir={tmp_path}", *overrides] for arg in ("--set", o)]
    return main(["train", str(REPO / "configs" / "ppo-cartpole.yaml"), *sets])


@pytest.mark.parametrize("backend", ["inline", "local"])
def test_an_env_raising_stops_the_run_at_once_with_its_first_traceback(tmp_path: Path, capsys, backend: str) -> None:
    started = time.monotonic()
    code = train_cli(tmp_path, "env.id=nimbus/RaisingCartPole-v0", f"runtime.backend={backend}")
    out = capsys.readouterr().err
    assert code == 1 and time.monotonic() - started < 60
    head = " ".join(out.split("--- original traceback ---")[0].split())   # rich wraps long lines
    assert "failed after 1 attempt(s): ValueError: injected error on every step" in head
    assert "faults.py" in head and "in _misbehave" in head        # the innermost frame, in the summary
    assert "the function's own code" in head and "retry_exceptions=0" in head
    rows = [json.loads(line) for line in next(tmp_path.glob("*/ledger.jsonl")).read_text().splitlines()]
    failed = [(r["invocation_id"], r["attempt"]) for r in rows if r["outcome"] == "error"]
    assert failed and all(attempt == 1 for _, attempt in failed)   # not retried: each invocation tried once


def test_retry_exceptions_retries_the_env_s_own_error_that_many_times(tmp_path: Path, capsys) -> None:
    code = train_cli(tmp_path, "env.id=nimbus/RaisingCartPole-v0", "runtime.backend=inline",
                     "actors.function.retry_exceptions=2")
    out = " ".join(capsys.readouterr().err.split())
    assert code == 1 and "failed after 3 attempt(s)" in out and "retry_exceptions=2" in out
