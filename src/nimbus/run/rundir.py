"""One process owns a run directory at a time, and a run directory that holds a run is never reused as a new one.

``claim_run_dir`` takes an OS lock (``fcntl.flock`` on ``RUN_DIR/.lock``) for the run's whole life: the OS
releases it when the process exits, crashes or is killed, so a stale lock cannot outlive its holder. A second
``nimbus train`` of the same directory (two ``--resume`` at once) stops at once with exit 2 naming the holder's
pid. A new run (no ``--resume``, or ``--resume`` into another ``--run-dir``) refuses a directory that already
holds files (exit 2, suggesting ``--resume``), so one run's metrics, ledger, config and checkpoints are never
mixed with another's. A resumed directory's JSON-lines files get their torn tails cut before anything appends.

Example::

    with claim_run_dir(run_dir=Path("runs/x"), resuming=True):
        ...   # train; the lock is held until the block ends
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nimbus.data.jsonl import cut_torn_tail
from nimbus.errors import ConfigError

LOCK_NAME = ".lock"


class RunDirError(ConfigError):
    """The run directory is held by another process, or holds another run (exit 2, before anything starts)."""


@contextmanager
def claim_run_dir(*, run_dir: Path, resuming: bool) -> Iterator[Path]:
    """Hold ``run_dir``'s lock for the block; ``resuming``: the directory continues its own run (it may hold files),
    otherwise it must be new or empty."""
    with hold_lock(directory=run_dir, what="run directory", hint="wait for it to end, or use another --run-dir"):
        _check_claimable(run_dir=Path(run_dir), resuming=resuming)
        yield Path(run_dir)


@contextmanager
def hold_lock(*, directory: Path, what: str, hint: str) -> Iterator[None]:
    """Hold ``directory/.lock`` (made if missing) for the block, its holder's pid written in it; held by another
    process: RunDirError (exit 2) naming ``what``, the holder's pid and ``hint``."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / LOCK_NAME, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the whole block
    except OSError as exc:   # a read-only or unwritable place: bad input, before anything starts
        raise RunDirError(f"{directory}: cannot write this {what} ({exc.strerror or exc})") from None
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise RunDirError(f"{directory}: this {what} is in use by another nimbus process (pid {holder}); "
                              f"{hint}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()   # releases the lock (the OS does the same if the process dies)


def _check_claimable(*, run_dir: Path, resuming: bool) -> None:
    if resuming:
        for path in sorted(run_dir.rglob("*.jsonl")):
            cut_torn_tail(path=path)
        return
    found = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_NAME)
    if found:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise RunDirError(f"{run_dir} already holds a run ({shown}); a new run needs a new or empty directory "
                          f"(continue that run with: nimbus train --resume {run_dir})")
