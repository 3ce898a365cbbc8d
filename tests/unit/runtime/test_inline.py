"""The in-process runtime (runtime/inline.py): submission order, cold then warm, retries and their ledger rows,
FunctionFailed with the original error, the driver's threads and RNGs kept, the codec's refusals, devices."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from nimbus.config import parse_config
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.errors import ConfigError, FunctionFailed
from nimbus.runtime.base import FunctionContext, FunctionSpec, Resources
from nimbus.runtime.devices import DevicePool
from nimbus.runtime.inline import InlineRuntime

CALLS: list[tuple[str, int]] = []  # (function, header["i"]) in the order the functions ran


def record(*, context: FunctionContext, request: Message) -> Message:
    CALLS.append((context.function, int(request.header["i"])))
    return Message(header={"i": request.header["i"]})


def reseed(*, context: FunctionContext, request: Message) -> Message:
    """What actor.py and learner.py do as if they owned a process: set the thread count, reseed every RNG."""
    torch.set_num_threads(1)
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(7)
    draws = [torch.rand(1).item(), float(np.random.rand()), random.random()]
    return Message(header={"draws": draws, "threads": torch.get_num_threads()})


def object_result(*, context: FunctionContext, request: Message) -> Message:
    return Message(arrays={"bad": np.array([object()], dtype=object)})


def hand_back(*, context: FunctionContext, request: Message) -> Message:
    """Return the request's array and keep it in the warm cache (a worker would copy it through the codec)."""
    context.cache["kept"] = request.arrays["x"]
    return Message(arrays={"x": request.arrays["x"]})


def threads_set_when_cold(*, context: FunctionContext, request: Message) -> Message:
    """As MARLess's actor and learner do: set the threads when the cache is built (the cold call), not after."""
    if "built" not in context.cache:
        context.cache["built"] = True
        torch.set_num_threads(int(request.header["threads"]))
    return Message(header={"threads": torch.get_num_threads()})


STARTED = threading.Event()


def started_then_sleep(*, context: FunctionContext, request: Message) -> Message:
    STARTED.set()
    threading.Event().wait(float(request.header["seconds"]))
    return Message(header={"slept": True})


def inline_cache_of(inline: InlineRuntime, name: str) -> dict:
    return next(slot.cache for key, slot in inline._slots.items() if key[0] == name)


def spec_of(name: str, *, entrypoint: str | None = None, **kwargs) -> FunctionSpec:
    return FunctionSpec(name=name, entrypoint=entrypoint or f"{__name__}:{name}", timeout_s=5.0, **kwargs)


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[tuple[InlineRuntime, Ledger]]:
    ledger = Ledger(path=tmp_path / "ledger.jsonl")
    inline = InlineRuntime(ledger=ledger)
    yield inline, ledger
    inline.shutdown()


def test_invocations_run_one_at_a_time_in_submission_order(runtime) -> None:
    inline, _ = runtime
    CALLS.clear()
    specs = [spec_of("record"), FunctionSpec(name="other", entrypoint=f"{__name__}:record")]
    futures = [inline.invoke(spec=specs[i % 2], request=Message(header={"i": i})) for i in range(12)]
    assert [f.result(timeout=30).header["i"] for f in futures] == list(range(12))
    assert CALLS == [(specs[i % 2].name, i) for i in range(12)]


def test_first_call_of_a_pool_key_is_cold_then_warm_with_one_cache(runtime) -> None:
    inline, ledger = runtime
    spec = spec_of("counter", entrypoint="nimbus.runtime.builtin:counter")
    bigger = FunctionSpec(name="counter", entrypoint=spec.entrypoint, resources=Resources(cpus=2))
    headers = [f.result(timeout=30).header for f in inline.map(spec=spec, requests=[Message()] * 3)]
    other = inline.invoke(spec=bigger, request=Message()).result(timeout=30).header
    assert [h["calls"] for h in headers] == [1, 2, 3] and other["calls"] == 1   # another pool key: its own cache
    assert {h["worker_id"] for h in headers} == {"inline-counter"}
    rows = ledger.records()
    assert [(r.cold, r.outcome, r.cpus) for r in rows] == [(True, "ok", 1), (False, "ok", 1), (False, "ok", 1),
                                                           (True, "ok", 2)]
    assert rows[0].init_s > 0 and rows[1].init_s == 0
    stats = inline.stats()
    assert (stats.cold_starts, stats.warm_starts, stats.workers_alive, stats.queued) == (2, 2, 2, 0)


def test_prewarm_loads_once_and_the_first_call_is_warm(runtime) -> None:
    inline, ledger = runtime
    spec = spec_of("counter", entrypoint="nimbus.runtime.builtin:counter")
    inline.prewarm(spec=spec, count=3, wait_s=30)
    inline.prewarm(spec=spec, count=1)
    inline.invoke(spec=spec, request=Message()).result(timeout=30)
    assert [(r.outcome, r.cold) for r in ledger.records()] == [("prewarm", True), ("ok", False)]


def test_an_error_is_retried_with_a_ledger_row_per_attempt(runtime) -> None:
    inline, ledger = runtime
    spec = spec_of("scripted", entrypoint="nimbus.runtime.builtin:scripted", max_retries=3)
    result = inline.invoke(spec=spec, request=Message(header={"script": ["error", "error"]})).result(timeout=30)
    assert result.header["_attempt"] == 3 and result.header["attempt"] == 3
    rows = ledger.records()
    assert [(r.attempt, r.outcome, r.error_type, r.cold) for r in rows] == [
        (1, "error", "InjectedFault", True), (2, "error", "InjectedFault", False), (3, "ok", None, False)]
    assert {r.invocation_id for r in rows} == {result.header["_invocation_id"]}
    assert inline.stats().retries == 2


def test_after_max_retries_the_future_raises_the_original_error(runtime) -> None:
    inline, ledger = runtime
    spec = spec_of("raise_error", entrypoint="nimbus.runtime.builtin:raise_error", max_retries=2, retry_exceptions=2)
    future = inline.invoke(spec=spec, request=Message(header={"error": "ValueError"}))
    with pytest.raises(FunctionFailed) as caught:
        future.result(timeout=30)
    assert caught.value.error_type == "ValueError" and caught.value.attempts == 3
    assert "raise_error: ValueError on attempt 1" in caught.value.traceback_text   # the first traceback
    assert [(r.attempt, r.outcome) for r in ledger.records()] == [(1, "error"), (2, "error"), (3, "error")]
    assert inline.stats().failed_invocations == 1
    fatal = spec_of("scripted", entrypoint="nimbus.runtime.builtin:scripted", max_retries=3)
    with pytest.raises(FunctionFailed, match="EnvContractError"):   # not retryable: one attempt
        inline.invoke(spec=fatal, request=Message(header={"script": ["fatal"]})).result(timeout=30)
    assert len(ledger.records()) == 4


def test_the_driver_keeps_its_thread_count_and_random_states(runtime) -> None:
    inline, _ = runtime
    torch.set_num_threads(2)
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    expected = [torch.rand(1).item(), float(np.random.rand()), random.random()]
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    first = inline.invoke(spec=spec_of("reseed"), request=Message()).result(timeout=30).header
    assert first["threads"] == 1   # the function did change them, inside the call
    assert torch.get_num_threads() == 2
    assert [torch.rand(1).item(), float(np.random.rand()), random.random()] == expected
    second = inline.invoke(spec=spec_of("reseed"), request=Message()).result(timeout=30).header
    assert second["draws"] == first["draws"]


def test_a_warm_call_runs_at_the_threads_its_slot_left_not_at_the_drivers(runtime) -> None:
    inline, _ = runtime
    torch.set_num_threads(2)
    one = spec_of("threads_set_when_cold")                                 # cpus 1: a worker's cap is 1
    seen = [inline.invoke(spec=one, request=Message(header={"threads": 4})).result(timeout=30).header["threads"]
            for _ in range(2)]
    assert seen == [1, 1]                                                 # 4 clamped to cpus; warm stays at 1
    two = FunctionSpec(name="wide", entrypoint=one.entrypoint, timeout_s=5.0, resources=Resources(cpus=2))
    seen = [inline.invoke(spec=two, request=Message(header={"threads": 1})).result(timeout=30).header["threads"]
            for _ in range(2)]
    assert seen == [1, 1]                                                 # its cold call set 1; the warm one keeps it
    assert torch.get_num_threads() == 2                                   # the driver's own count is back


def test_a_result_the_codec_refuses_fails_as_in_a_worker(runtime) -> None:
    inline, ledger = runtime
    with pytest.raises(FunctionFailed, match="CodecError") as caught:
        inline.invoke(spec=spec_of("object_result", max_retries=1, retry_exceptions=1), request=Message()).result(
            timeout=30)
    assert "dtype object is not supported" in caught.value.traceback_text
    assert [r.outcome for r in ledger.records()] == ["error", "error"]


def test_requests_and_results_are_copies_through_the_codec(runtime) -> None:
    inline, _ = runtime
    busy = inline.invoke(spec=spec_of("started_then_sleep"), request=Message(header={"seconds": 0.2}))
    sent = np.arange(4, dtype=np.float32)
    future = inline.invoke(spec=spec_of("hand_back"), request=Message(arrays={"x": sent}))
    sent[0] = 99.0   # the caller reuses its buffer before the call runs: the function sees what was sent
    back = future.result(timeout=30).arrays["x"]
    assert busy.done() and back.tolist() == [0.0, 1.0, 2.0, 3.0] and not np.shares_memory(back, sent)
    assert back.flags.writeable and not np.shares_memory(back, inline_cache_of(inline, "hand_back")["kept"])


def test_an_overrun_timeout_is_logged_once_not_enforced(runtime, caplog: pytest.LogCaptureFixture) -> None:
    inline, ledger = runtime
    spec = FunctionSpec(name="sleep", entrypoint="nimbus.runtime.builtin:sleep", timeout_s=0.01)
    with caplog.at_level(logging.WARNING, logger="nimbus.runtime.inline"):
        for _ in range(2):
            inline.invoke(spec=spec, request=Message(header={"seconds": 0.05})).result(timeout=30)
    assert [r.outcome for r in ledger.records()] == ["ok", "ok"]
    assert len([m for m in caplog.messages if "over timeout_s" in m]) == 1


def test_a_device_is_leased_around_each_call(tmp_path: Path) -> None:
    devices = DevicePool(devices=("cpu:0",), kinds=frozenset({"learner"}))
    inline = InlineRuntime(ledger=(ledger := Ledger()), devices=devices)
    try:
        spec = FunctionSpec(name="sleep", entrypoint="nimbus.runtime.builtin:sleep", kind="learner")
        header = inline.invoke(spec=spec, request=Message(header={"seconds": 0})).result(timeout=30).header
    finally:
        inline.shutdown()
    assert header["device"] == "cpu:0" and devices.free() == 1 and devices.leases_granted == 1
    assert ledger.records()[0].device == "cpu:0"


def test_shutdown_waits_for_the_running_call_cancels_the_queued_and_refuses_more(runtime) -> None:
    inline, _ = runtime
    STARTED.clear()
    running = inline.invoke(spec=spec_of("started_then_sleep"), request=Message(header={"seconds": 0.3}))
    queued = inline.invoke(spec=spec_of("started_then_sleep"), request=Message(header={"seconds": 0}))
    assert STARTED.wait(timeout=30)
    inline.shutdown()
    assert running.result(timeout=0).header["slept"] and queued.cancelled()
    with pytest.raises(RuntimeError, match="after shutdown"):
        inline.invoke(spec=spec_of("record"), request=Message())


def test_inline_with_the_ray_store_is_refused_naming_store_backend() -> None:
    with pytest.raises(ConfigError, match="store.backend: ray needs runtime.backend: ray"):
        parse_config(data={"algo": {"name": "ppo"}, "runtime": {"backend": "inline"}, "store": {"backend": "ray"}})
    parsed = parse_config(data={"algo": {"name": "dqn"}, "runtime": {"backend": "inline"},
                                "train": {"workflow": "offpolicy"}})
    assert parsed.runtime.backend == "inline"


def test_a_failure_outside_the_function_fails_its_future_and_the_runtime_goes_on() -> None:
    class BrokenPool(DevicePool):
        def acquire(self, **kwargs):
            raise RuntimeError("device pool broke")

    inline = InlineRuntime(ledger=Ledger(), devices=BrokenPool(devices=("cpu:0",), kinds=frozenset({"learner"})))
    try:
        broken = FunctionSpec(name="sleep", entrypoint="nimbus.runtime.builtin:sleep", kind="learner")
        with pytest.raises(RuntimeError, match="device pool broke"):
            inline.invoke(spec=broken, request=Message(header={"seconds": 0})).result(timeout=30)
        fine = FunctionSpec(name="sleep", entrypoint="nimbus.runtime.builtin:sleep")
        header = inline.invoke(spec=fine, request=Message(header={"seconds": 0})).result(timeout=30).header
        assert header["slept_s"] == 0
    finally:
        inline.shutdown()
