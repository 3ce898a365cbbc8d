"""The simulated runtime's waits (runtime/simulated.py): what the driver blocks on advances the virtual clock.

``SimFuture.result`` and ``SimEvents.get`` run the simulation's events until a result is delivered instead of
blocking; ``SimTimer`` is a callback due at a simulated moment; ``single_threaded`` clamps torch to one thread
while a simulated function runs.

Example::

    events = runtime.event_queue()          # a SimEvents
    kind, future, meta = events.get(timeout=0.5)   # 0.5 simulated seconds at most; queue.Empty after
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nimbus.runtime.simulated import SimulatedRuntime


class SimTimer:
    """A callback due at a simulated moment (``SimulatedRuntime.call_later``); ``cancel()`` drops it if not yet run."""

    def __init__(self, *, callback: Callable[[], None]) -> None:
        self.callback, self.cancelled = callback, False

    def cancel(self) -> None:
        self.cancelled = True


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Torch at one thread inside the block, whatever a function asks (``set_num_threads`` clamped to 1): a simulated
    function's real speed does not matter, a thread pool fighting the driver's does (5-10x slower on a loaded
    machine), and one thread gives the same floating-point sums on every machine."""
    import torch

    original = torch.set_num_threads
    torch.set_num_threads = lambda n: original(1)
    original(1)
    try:
        yield
    finally:
        torch.set_num_threads = original


class SimFuture(Future):
    """A future whose ``result``/``exception`` advance the simulation until it is resolved (instead of blocking)."""

    def __init__(self, *, runtime: SimulatedRuntime) -> None:
        super().__init__()
        self._runtime = runtime

    def result(self, timeout: float | None = None) -> Any:
        self._runtime.wait_for(future=self)
        return super().result(timeout=0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._runtime.wait_for(future=self)
        return super().exception(timeout=0)


class SimEvents(queue.Queue):
    """The workflow's event queue under simulation: ``get`` advances the clock to the next delivered result."""

    def __init__(self, *, runtime: SimulatedRuntime) -> None:
        super().__init__()
        self._runtime = runtime

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Run events until a result is delivered or, with ``timeout``, until ``timeout`` simulated seconds passed
        (the clock then stands at the deadline and ``queue.Empty`` is raised, as a real wait would time out).
        ``block=False`` runs only the events due now; ``timeout=None`` waits for the next result, and raises
        ``queue.Empty`` (instead of hanging) when nothing is in flight."""
        deadline = self._runtime.now_s() + (timeout or 0.0) if timeout is not None or not block else None
        while self.empty() and self._runtime.advance(until_s=deadline):
            pass
        if self.empty() and deadline is not None:
            self._runtime.idle(seconds=deadline - self._runtime.now_s())   # the wait times out in virtual time
        return super().get(block=False)                   # queue.Empty when nothing came
