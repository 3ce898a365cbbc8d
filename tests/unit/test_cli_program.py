"""``nimbus train`` as a program restarts itself once with glibc's streaming-copy tunable when it is missing
(cli.py ``_restart_with_streaming_copies``): its workers are forks of the driver, and the tunable is read only when a
process starts. A user's own ``GLIBC_TUNABLES`` wins, and ``main`` called with arguments (a test, a script) never
restarts the process that called it."""

from __future__ import annotations

import os
import subprocess
import sys

from nimbus.data.shm import streaming_copy_env

# Prints what the process started with, then runs the command line: a restart prints a second line.
_PROGRAM = ("import os, sys; print(os.environ.get('GLIBC_TUNABLES'), flush=True); from nimbus.cli import main; "
            "sys.argv = ['nimbus', *sys.argv[1:]]; sys.exit(main({argv}))")


def _run(*, argv: str = "None", env: dict[str, str]) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", _PROGRAM.format(argv=argv), "train", "no-such-config.yaml"],
                          env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout.splitlines()


def _without_tunables() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "GLIBC_TUNABLES"}


def test_train_restarts_once_with_the_streaming_copy_tunable() -> None:
    code, lines = _run(env=_without_tunables())
    assert code == 2   # the missing config, reported by the restarted process
    assert lines == ["None", streaming_copy_env({})["GLIBC_TUNABLES"]]


def test_a_users_tunables_are_kept_and_nothing_restarts() -> None:
    code, lines = _run(env={**_without_tunables(), "GLIBC_TUNABLES": "glibc.malloc.check=0"})
    assert (code, lines) == (2, ["glibc.malloc.check=0"])


def test_main_with_arguments_never_restarts_its_caller() -> None:
    code, lines = _run(argv="['train', 'no-such-config.yaml']", env=_without_tunables())
    assert (code, lines) == (2, ["None"])
