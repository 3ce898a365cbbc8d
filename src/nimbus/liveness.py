"""Progress heartbeats (P5, docs/reliability.md): code that makes progress calls ``beat()``; the worker forwards
at most one heartbeat per interval to the driver, which kills and retries a function silent for
``SILENT_BEATS`` intervals.

A heartbeat means *progress*, not merely "the process exists": it is sent from the function's own
thread when it passes a progress point (an env ``reset``/``step`` through the contract wrapper, every
optimizer step of a learner through torch's global post-step hook), so a ``step()`` that sleeps
forever goes silent even though its process is alive. Outside a worker ``beat()`` does nothing.
This module imports nothing: every layer may call it.

Example::

    from nimbus.liveness import beat
    for _ in range(steps):
        env.step(action)
        beat()             # cheap: one clock read unless an interval has passed
"""

from __future__ import annotations

import time
from collections.abc import Callable

SILENT_BEATS = 3  # a function silent for this many intervals is declared stalled

_send: Callable[[], None] | None = None
_interval_s = 0.0
_last_sent = 0.0


def beat() -> None:
    """Report progress; forwarded to the driver at most once per interval (no-op outside a worker)."""
    global _last_sent
    if _send is None:
        return
    now = time.monotonic()
    if now - _last_sent >= _interval_s:
        _last_sent = now
        _send()


def install(*, send: Callable[[], None] | None, interval_s: float = 0.0) -> None:
    """The worker's side: route beats to ``send`` every ``interval_s`` (None: stop forwarding)."""
    global _send, _interval_s, _last_sent
    _send, _interval_s, _last_sent = send, interval_s, time.monotonic()
