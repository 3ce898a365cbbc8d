"""SIGINT/SIGTERM → ``request_stop()`` on every workflow of the run: the loop then checkpoints the newest
complete version and exits 0 (no final evaluation after a signal).

Example::

    with Interrupt(workflows=[workflow]) as interrupt:
        members.drive(on_failure=...)             # run/members.py: stops at the next event
    interrupt.received            # "SIGINT", "SIGTERM" or None
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from typing import Any, Protocol


class Stoppable(Protocol):
    def request_stop(self) -> None: ...


class Interrupt:
    """Installs the handlers on entry (main thread only) and restores the previous ones on exit."""

    def __init__(self, *, workflows: Sequence[Stoppable]) -> None:
        self.workflows = workflows
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupt:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name
        for workflow in self.workflows:
            workflow.request_stop()

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
