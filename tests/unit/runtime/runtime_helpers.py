"""Helpers shared by the runtime tests (process liveness, polling, a malicious pickle)."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Callable


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(predicate: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


class _Evil:
    """Unpickling this runs ``touch <path>``: the side effect P11 tests look for."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def evil_pickle(path: Path) -> bytes:
    return pickle.dumps(_Evil(path))
