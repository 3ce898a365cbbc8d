"""P5 liveness on the ray runtime: the local rule (test_liveness.py) — stalled after 3 silent intervals,
not 9; a function that beats runs as long as it needs; a superseded attempt's progress counts for nothing."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.errors import FunctionFailed
from nimbus.runtime.attempts import Attempt
from nimbus.runtime.base import FunctionSpec, Resources

pytestmark = pytest.mark.ray
B = "nimbus.runtime.builtin:"
HALF = Resources(cpus=0.5, memory_mb=256)


@pytest.fixture
def make_runtime(ray_local, tmp_path: Path):
    from nimbus.runtime.ray_backend import RayRuntime

    created = []

    def make():
        ledger = Ledger(path=tmp_path / f"ledger{len(created)}.jsonl")
        created.append(RayRuntime(ledger=ledger, address="local"))
        return created[-1], ledger

    yield make
    for runtime in created:
        runtime.shutdown()


def _spec(name: str, fn: str, **kwargs) -> FunctionSpec:
    return FunctionSpec(name=name, entrypoint=B + fn, resources=HALF, **kwargs)


def test_a_silent_function_is_killed_and_retried_after_three_intervals_not_nine(make_runtime) -> None:
    """Silent for 1.5 s at heartbeat_s=0.25: stalled at 0.75 s (a 9-interval rule would let it finish at
    1.5 s < 2.25 s), then the retry stalls too."""
    runtime, ledger = make_runtime()
    spec = _spec("pause", "sleep", timeout_s=120, max_retries=1, heartbeat_s=0.25)
    runtime.prewarm(spec=spec, count=2, wait_s=60)
    with pytest.raises(FunctionFailed, match="Stalled"):
        runtime.invoke(spec=spec, request=Message(header={"seconds": 1.5})).result(timeout=120)
    attempts = [r for r in ledger.records() if r.outcome != "prewarm"]
    assert [(r.outcome, r.error_type) for r in attempts] == [("timeout", "Stalled")] * 2


def test_a_function_that_beats_outlives_many_intervals(make_runtime) -> None:
    runtime, ledger = make_runtime()
    spec = _spec("beating", "beating", timeout_s=120, max_retries=0, heartbeat_s=0.3)
    runtime.prewarm(spec=spec, count=1, wait_s=60)
    runtime.invoke(spec=spec, request=Message(header={"seconds": 3.0})).result(timeout=120)
    assert [r.outcome for r in ledger.records() if r.outcome != "prewarm"] == ["ok"]


def test_progress_of_a_superseded_attempt_does_not_keep_a_silent_one_alive(make_runtime) -> None:
    """Progress replies that name an earlier attempt, or another invocation, or arrive for an attempt the
    worker no longer runs, all with huge beat counts: the silent attempt still stalls."""
    from nimbus.runtime.ray_worker import to_frame

    runtime, ledger = make_runtime()
    spec = _spec("hung", "sleep", timeout_s=120, max_retries=0, heartbeat_s=0.3)
    runtime.prewarm(spec=spec, count=1, wait_s=60)
    future = runtime.invoke(spec=spec, request=Message(header={"seconds": 3600}))
    done, beats = threading.Event(), iter(range(10**6, 10**9))

    def reply(invocation_id: str, number: int) -> Future:
        answer: Future = Future()
        answer.set_result(to_frame(Message(header={"invocation_id": invocation_id, "attempt": number,
                                                   "beats": next(beats)}), compress_min_bytes=None))
        return answer

    def stale_progress() -> None:
        while not done.wait(0.05):
            for worker in [w for w in list(runtime._pool.slots.values()) if w.state == "busy" and w.attempt]:
                current = worker.attempt
                earlier = Attempt(invocation=current.invocation, number=current.number - 1, cold=False)
                inv = current.invocation.invocation_id
                for attempt, answer in ((current, reply(inv, current.number - 1)),
                                        (current, reply("another-" + inv, current.number)),
                                        (earlier, reply(inv, earlier.number))):
                    runtime._post(lambda w=worker, a=attempt, f=answer: runtime._on_progress(w, a, f))

    feeder = threading.Thread(target=stale_progress, daemon=True)
    feeder.start()
    try:
        with pytest.raises(FunctionFailed, match="Stalled"):
            future.result(timeout=60)
    finally:
        done.set()
        feeder.join(timeout=5)
    assert [r.error_type for r in ledger.records() if r.outcome != "prewarm"] == ["Stalled"]
