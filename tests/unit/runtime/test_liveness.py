"""P5 liveness on the local runtime: a function silent for 3 heartbeat intervals is named, killed and
retried, and fails once its retries are spent; one that reports progress runs as long as it needs."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from nimbus import liveness
from nimbus.data.codec import Message
from nimbus.data.frames import Envelope
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
                        heartbeat_s=0.2, kind="learner")   # silent for 0.6 s: stalled, well within the 1.2 s run
    header = runtime.invoke(spec=spec, request=Message(header={"seconds": 1.2})).result(timeout=60).header
    assert header["steps"] > 10 and [r.outcome for r in ledger.records()] == ["ok"]


def test_stalled_after_three_silent_intervals_not_more(make_runtime) -> None:
    """The rule is 3 intervals: a function silent for 6 (1.5 s at heartbeat_s=0.25) is killed, although it
    would have finished had the rule been 9 intervals (2.25 s) — margins of 0.75 s either side."""
    runtime, ledger = make_runtime()
    spec = FunctionSpec(name="pause", entrypoint=B + "sleep", timeout_s=60, max_retries=0, heartbeat_s=0.25)
    runtime.prewarm(spec=spec, count=1, wait_s=30)
    future = runtime.invoke(spec=spec, request=Message(header={"seconds": 1.5}))
    with pytest.raises(FunctionFailed, match="Stalled"):
        future.result(timeout=30)
    assert [r.error_type for r in ledger.records() if r.outcome != "prewarm"] == ["Stalled"]


def test_beats_of_a_superseded_attempt_do_not_keep_a_silent_one_alive(make_runtime) -> None:
    """Heartbeat frames tagged with an earlier attempt of the invocation (or another invocation) reach the
    worker that runs the current, silent attempt: they count for nothing, and each attempt stalls."""
    runtime, ledger = make_runtime()
    spec = FunctionSpec(name="hung", entrypoint=B + "sleep", timeout_s=120, max_retries=1, heartbeat_s=0.3)
    future = runtime.invoke(spec=spec, request=Message(header={"seconds": 3600}))
    done = threading.Event()

    def stale_beats() -> None:
        while not done.wait(0.05):
            for worker in [w for w in list(runtime._pool.slots.values()) if w.state == "busy" and w.attempt]:
                invocation_id, number = worker.attempt.invocation.invocation_id, worker.attempt.number
                for tag in ({"invocation_id": invocation_id, "attempt": number - 1},
                            {"invocation_id": "another-" + invocation_id, "attempt": number}):
                    runtime._on_envelope(Envelope(source=worker.worker_id, tag={"op": "heartbeat", **tag},
                                                  message=Message(), nbytes=0, via_segment=False, compressed=False))

    feeder = threading.Thread(target=stale_beats, daemon=True)
    feeder.start()
    try:
        with pytest.raises(FunctionFailed, match="Stalled"):
            future.result(timeout=30)
    finally:
        done.set()
        feeder.join(timeout=5)
    assert [r.error_type for r in ledger.records()] == ["Stalled", "Stalled"]


class _Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def monotonic(self) -> float:
        return self.now_s


def test_beat_forwards_at_most_one_per_interval_and_nothing_outside_a_worker(monkeypatch) -> None:
    """The worker's side of the rule: the first beat after each interval is sent, the rest are not; after
    ``install(send=None)`` (between invocations, in the driver) nothing is."""
    clock, sent = _Clock(), []
    monkeypatch.setattr(liveness, "time", clock)
    liveness.install(send=lambda: sent.append(clock.now_s), interval_s=1.0)
    try:
        for _ in range(50):  # 5 s of beats every 0.1 s
            clock.now_s += 0.1
            liveness.beat()
        forwarded = len(sent)
        assert forwarded in (4, 5) and all(b - a >= 1.0 - 1e-9 for a, b in zip(sent, sent[1:]))
        liveness.install(send=None)
        clock.now_s += 10.0
        liveness.beat()
        assert len(sent) == forwarded
    finally:
        liveness.install(send=None)


def test_a_hessian_probe_far_longer_than_three_intervals_completes(make_runtime) -> None:
    """#25.6: Nitro's probe beats once per Hessian-vector product, so a probe of seconds on a forked worker
    with heartbeat_s=0.2 (stalled after 0.6 s of silence) runs to its end instead of being killed. Each HVP waits
    2 x 0.03 s, a tenth of the silence that stalls. The probe's modules are preloaded, as a learner's are imported
    at its worker's start."""
    runtime, ledger = make_runtime(start_method="fork_server", preload=("torch", "nimbus.analysis.hessian"))
    spec = FunctionSpec(name="learner", entrypoint=B + "hessian_probe", timeout_s=120, max_retries=0,
                        heartbeat_s=0.2, kind="learner")
    request = Message(header={"num_params": 60, "max_iterations": 40, "hvp_delay_s": 0.03})
    header = runtime.invoke(spec=spec, request=request).result(timeout=120).header
    assert header["probe_s"] > 3 * 3 * 0.2 and header["num_hvps"] >= 30
    assert abs(header["lambda_max"] - 4.0) < 1e-3 and abs(header["lambda_min"] + 2.0) < 1e-3  # 2 x scale's ends
    assert [r.outcome for r in ledger.records()] == ["ok"]


def test_every_ppo_minibatch_beats_even_one_whose_step_is_skipped() -> None:
    """A PPO update whose minibatches are all non-finite takes no optimizer step (so the worker's optimizer
    hook never beats), yet it is progress: each minibatch beats."""
    import torch

    from nimbus.algos.step import guarded_step

    sent: list[int] = []
    weight = torch.zeros(3, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.1)
    liveness.install(send=lambda: sent.append(1), interval_s=0.0)
    try:
        for _ in range(3):
            outcome = guarded_step(optimizer=optimizer, params=[weight], loss=(weight * float("nan")).sum(),
                                   max_grad_norm=0.5)
            assert not bool(outcome.finite) and not weight.any()
    finally:
        liveness.install(send=None)
    assert len(sent) == 3
