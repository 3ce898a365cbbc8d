"""The CLI prints an error's text as written: rich markup in a message (a bracketed fix such as
``[gymnasium.wrappers.FlattenObservation]``) is escaped, not swallowed (issue 29.4), for every error class the
CLI reports, and a full disk is one line with exit 1 instead of a traceback (issue 28.6)."""

from __future__ import annotations

import errno

import pytest

from nimbus import cli
from nimbus.errors import CheckpointError, ConfigError, NimbusError
from nimbus.run.rundir import RunDirError

BRACKETED = "add `env.wrappers: [gymnasium.wrappers.FlattenObservation]` to flatten it [bold]"


def _main_raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> int:
    parser = cli.make_parser()
    args = parser.parse_args(["envs"])

    def raise_it(_args) -> int:
        raise exc

    args.func = raise_it
    monkeypatch.setattr(cli, "make_parser", lambda: type("P", (), {"parse_args": lambda self, argv: args})())
    return cli.main([])


@pytest.mark.parametrize(("exc", "code", "label"), [
    (ConfigError(BRACKETED), 2, "config error"),
    (RunDirError(BRACKETED), 2, "run directory"),
    (NimbusError(BRACKETED), 1, "run failed"),
    (CheckpointError(BRACKETED), 1, "run failed"),
])
def test_every_error_class_prints_its_bracketed_text(monkeypatch, capsys, exc, code, label) -> None:
    assert _main_raising(monkeypatch, exc) == code
    err = " ".join(capsys.readouterr().err.split())
    assert f"{label}: {BRACKETED}" in err


def test_a_full_disk_is_one_clear_line_with_exit_1(monkeypatch, capsys) -> None:
    exc = OSError(errno.ENOSPC, "No space left on device", "/runs/x/metrics.jsonl")
    assert _main_raising(monkeypatch, exc) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "disk full: [Errno 28] No space left on device: '/runs/x/metrics.jsonl'" in err
    assert "nimbus train --resume RUN_DIR" in err


def test_other_os_errors_are_not_called_a_full_disk(monkeypatch) -> None:
    with pytest.raises(PermissionError):
        _main_raising(monkeypatch, PermissionError(errno.EACCES, "Permission denied"))


def test_a_refused_train_in_this_process_leaves_no_fork_server_for_the_next_test(run_cli, tmp_path) -> None:
    """tests/conftest.py's run_cli closes the fork server ``nimbus train`` starts once the config validated, before
    the run is built (runtime/spare_server.py start_early): left behind, the next local runtime of the test process
    adopted it, with the refused test's environment (test_custom_env_model's corridor was not importable after
    test_cli's exit 2)."""
    from pathlib import Path

    from nimbus.runtime import spare_server

    config = Path(__file__).resolve().parents[2] / "configs" / "ppo-cartpole.yaml"
    code, said = run_cli("train", str(config), "--set", "env.id=NoSuchEnv-v0", "--set", f"output.root_dir={tmp_path}")
    assert code == 2, said
    assert "server" not in spare_server._early
