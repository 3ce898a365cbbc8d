"""Helpers shared by the runtime tests (process liveness, polling, a malicious pickle)."""

from __future__ import annotations

from pathlib import Path

from support import evil_pickle, wait_for  # noqa: F401  (tests/support.py; the runtime tests import them from here)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
