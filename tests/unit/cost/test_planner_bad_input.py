"""``nimbus plan`` (timing-only) on bad input: exit 2 naming the argument or what the run lacks, never a traceback,
never negative seconds or dollars."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.cost.ledger import LedgerRecord
from tests.unit.cost.test_planner import make_run


@pytest.mark.parametrize(("flag", "value"), [("--actors", "0"), ("--actors", "-4"), ("--learners", "0"),
                                             ("--rounds", "-1"), ("--capacity-cpus", "0")])
def test_a_count_below_one_is_refused_naming_it(run_cli, tmp_path: Path, flag: str, value: str) -> None:
    run = make_run(tmp_path, actors=2)
    args = ["plan", str(run), "--actors", "8", flag, value] if flag != "--actors" else ["plan", str(run), flag, value]
    code, said = run_cli(*args)
    assert code == 2 and flag in said and "Traceback" not in said, said


def _run_with(tmp_path: Path, *, kinds: list[str]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("env: {num_envs_per_actor: 4}\nactors: {fragment_steps: 32}\n")
    (run / "metrics.jsonl").write_text(json.dumps({"round": 0, "num_actors": 1, "round_s": 1.0}) + "\n")
    (run / "ledger.jsonl").write_text("".join(LedgerRecord(
        invocation_id=f"i{k}", attempt=1, function=kind, kind=kind, worker_id="w", cold=False, init_s=0.0,
        queued_at=0.0, start_at=0.0, end_at=1.0, duration_s=1.0, billed_s=1.0, cpus=1.0, gpus=0.0, memory_mb=1024,
        outcome="ok").to_json() + "\n" for k, kind in enumerate(kinds)))
    return run


@pytest.mark.parametrize("kinds", [[], ["policy", "critic"], ["actor", "gradient", "parameter"]])
def test_a_run_the_model_cannot_profile_is_refused_with_a_reason(run_cli, tmp_path: Path, kinds) -> None:
    """An empty ledger, a MARLess run (policy, critic), a Stellaris run (no "learner" attempt)."""
    code, said = run_cli("plan", str(_run_with(tmp_path, kinds=kinds)), "--actors", "8")
    assert code == 2 and "--simulate" in said and "StopIteration" not in said, said


def test_a_run_directory_without_its_files_or_with_a_bad_config_is_refused(run_cli, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, said = run_cli("plan", str(tmp_path / "empty"), "--actors", "8")
    assert code == 2 and "has no metrics.jsonl" in said
    run = make_run(tmp_path, actors=2)
    (run / "config.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")))
    code, said = run_cli("plan", str(run), "--actors", "8")
    assert code == 2 and "expands to more than" in said
