"""Helpers shared by the runtime tests (process liveness, polling, a malicious pickle)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from support import wait_for  # noqa: F401  (tests/support.py; the runtime tests import it from here)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class _Evil:
    """Unpickling this runs ``touch <path>``: the side effect P11 tests look for."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def evil_pickle(path: Path) -> bytes:
    return pickle.dumps(_Evil(path))
