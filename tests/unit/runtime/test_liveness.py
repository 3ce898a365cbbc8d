"""P5 liveness on the local runtime: a function silent for 3 heartbeat intervals is named, killed and
retried, and fails once its retries are spent; one that reports progress runs as long as it needs."""

from __future__ import annotations

import logging
import time

import pytest

from nimbus.data.codec import Message
from nimbus.errors import FunctionFailed
from nimbus.runtime.base import FunctionSpec

B = "nimbus.runtime.builtin:"


def test_a_silent_function_is_named_killed_retried_and_failed(make_runtime, caplog) -> None:
    runtime, ledger = make_runtime()
    spec = FunctionSpec(name="hung", entrypoint=B + "sleep", timeout_s=600, max_retries=1, heartbeat_s=0.3)
    runtime.prewarm(spec=spec, count=1, wait_s=30)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="nimbus.runtime.local"):
        future = runtime.invoke(spec=spec, request=Message(header={"seconds": 3600}))
        with pytest.raises(FunctionFailed, match="Stalled"):
            future.result(timeout=60)
    elapsed = time.monotonic() - started
    assert 2 * 0.9 <= elapsed < 10  # two attempts, each silent for 3 x 0.3 s, not the 600 s timeout
    attempts = [r for r in ledger.records() if r.outcome != "prewarm"]
    assert [(r.outcome, r.error_type) for r in attempts] == [("timeout", "Stalled")] * 2
    alerts = [r.getMessage() for r in caplog.records if "liveness" in r.getMessage()]
    assert len(alerts) == 2 and all("hung attempt" in a and "heartbeat" in a for a in alerts)


def test_a_function_that_beats_outlives_many_intervals(make_runtime) -> None:
    runtime, ledger = make_runtime()
    spec = FunctionSpec(name="beating", entrypoint=B + "beating", timeout_s=60, max_retries=0, heartbeat_s=0.2)
    runtime.invoke(spec=spec, request=Message(header={"seconds": 2.0})).result(timeout=30)
    assert [r.outcome for r in ledger.records()] == ["ok"]


def test_without_heartbeat_s_a_quiet_function_is_left_alone(make_runtime) -> None:
    runtime, _ = make_runtime()
    spec = FunctionSpec(name="quiet", entrypoint=B + "sleep", timeout_s=60, max_retries=0)
    result = runtime.invoke(spec=spec, request=Message(header={"seconds": 1.5})).result(timeout=30)
    assert result.header["slept_s"] == 1.5


def test_optimizer_steps_beat_for_a_learner(make_runtime) -> None:
    """The worker's torch hook turns every optimizer step into progress: a learner that never calls beat()."""
    runtime, ledger = make_runtime(start_method="fork_server", preload=("torch",))  # torch there at start, as a learner
    spec = FunctionSpec(name="learner", entrypoint=B + "optimizer_steps", timeout_s=60, max_retries=0,
                        heartbeat_s=0.3, kind="learner")
    header = runtime.invoke(spec=spec, request=Message(header={"seconds": 2.0})).result(timeout=60).header
    assert header["steps"] > 10 and [r.outcome for r in ledger.records()] == ["ok"]
