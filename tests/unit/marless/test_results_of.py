"""``results_of`` (marless/learning.py): how the MARLess controller awaits its functions. It awaits each future through
the future's own ``exception()``, so a future that does its work when awaited (a simulated runtime's advances the
virtual clock) resolves. ``concurrent.futures.wait`` blocked on such a future forever."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from nimbus.data.codec import Message
from nimbus.errors import NimbusError
from nimbus.marless.learning import results_of


class ResolvedWhenAwaited(Future):
    """A fake of runtime/simulated.py's SimFuture: nothing resolves it but awaiting it."""

    def __init__(self, *, value: Message | None = None, error: Exception | None = None) -> None:
        super().__init__()
        self.value, self.error = value, error

    def _resolve(self) -> None:
        if not self.done():
            self.set_exception(self.error) if self.error is not None else self.set_result(self.value)

    def result(self, timeout: float | None = None) -> Message:
        self._resolve()
        return super().result(timeout=0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._resolve()
        return super().exception(timeout=0)


def test_futures_resolved_only_by_awaiting_them_give_their_results_in_order() -> None:
    futures = [ResolvedWhenAwaited(value=Message(header={"i": i})) for i in range(3)]
    got: list[list[Message]] = []
    waiter = threading.Thread(target=lambda: got.append(results_of(futures=futures, what="actor")), daemon=True)
    waiter.start()
    waiter.join(timeout=30.0)   # concurrent.futures.wait never returned here (nothing resolves these but awaiting)
    assert not waiter.is_alive(), "results_of blocked on futures that only awaiting them resolves"
    assert [m.header["i"] for m in got[0]] == [0, 1, 2]


def test_every_future_ends_before_the_first_failure_is_raised_and_a_cancelled_one_is_a_failure() -> None:
    futures = [ResolvedWhenAwaited(error=RuntimeError("boom")), ResolvedWhenAwaited(value=Message(header={}))]
    with pytest.raises(NimbusError, match="a critic function failed after its retries: boom"):
        results_of(futures=futures, what="critic")
    assert futures[1].done()   # awaited before the first failure was raised, as concurrent.futures.wait did
    cancelled = Future()
    cancelled.cancel()
    with pytest.raises(NimbusError, match="a policy function failed"):
        results_of(futures=[cancelled], what="policy")
