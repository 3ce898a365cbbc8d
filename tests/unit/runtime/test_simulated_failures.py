"""The simulated runtime's failure injection (runtime/simulated.py ``_ending``, simulated_durations.py): a death is
drawn uniformly over the attempt's duration and apart from straggling, a death drawn after the timeout is a timeout
billed at it, and an attempt that raises ends by its timeout at the latest."""

from __future__ import annotations

import contextlib

from nimbus.config.simulation import DurationModel, SimulationConfig
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.errors import FunctionFailed
from nimbus.runtime.base import FunctionContext, FunctionSpec, Resources
from nimbus.runtime.simulated import SimulatedRuntime


def quick(*, context: FunctionContext, request: Message) -> Message:
    return Message()


def attempts(*, model: DurationModel, timeout_s: float, invocations: int = 20,
             entrypoint: str = f"{__name__}:quick") -> list:
    config = SimulationConfig(functions={"actor": model}, default=DurationModel(cold_start_s=0.0))
    ledger = Ledger()
    runtime = SimulatedRuntime(ledger=ledger, simulation=config, capacity_cpus=None, max_workers=None,
                               keep_alive_s=600.0, seed=0)
    spec = FunctionSpec(name="a", entrypoint=entrypoint, kind="actor", resources=Resources(cpus=1),
                        timeout_s=timeout_s, max_retries=0)
    futures = [runtime.invoke(spec=spec, request=Message()) for _ in range(invocations)]
    for future in futures:
        with contextlib.suppress(FunctionFailed):
            future.result()
    runtime.shutdown()
    return [r for r in ledger.records() if r.outcome != "prewarm"]


def raises(*, context: FunctionContext, request: Message) -> Message:
    raise ValueError("the function's own error")


def test_a_death_is_uniform_over_the_attempt() -> None:
    rows = attempts(model=DurationModel(median_s=10.0, cold_start_s=0.0, failure_fraction=0.5), timeout_s=100.0,
                    invocations=60)
    deaths = [r.end_at - r.start_at for r in rows if r.outcome == "worker_died"]
    assert 15 <= len(deaths) <= 45
    assert min(deaths) < 2.0 and max(deaths) > 8.0 and 3.0 < sum(deaths) / len(deaths) < 7.0   # over all 10 s


def test_straggling_and_death_are_drawn_apart() -> None:
    model = DurationModel(median_s=1.0, cold_start_s=0.0, failure_fraction=0.5, straggler_fraction=0.5,
                          straggler_factor=3.0)
    finished = sorted({round(r.end_at - r.start_at, 6) for r in attempts(model=model, timeout_s=100.0, invocations=60)
                       if r.outcome == "ok"})
    assert finished == [1.0, 3.0]   # attempts that lived include stragglers and others


def test_a_raising_attempt_ends_at_its_timeout_when_its_duration_is_longer() -> None:
    rows = attempts(model=DurationModel(median_s=100.0, cold_start_s=0.0), timeout_s=1.0, invocations=3,
                    entrypoint=f"{__name__}:raises")
    assert [r.outcome for r in rows] == ["error"] * 3
    assert all(abs((r.end_at - r.start_at) - 1.0) < 1e-9 for r in rows)


def test_a_death_drawn_after_the_timeout_is_a_timeout_billed_at_it() -> None:
    rows = attempts(model=DurationModel(median_s=100.0, cold_start_s=0.0, failure_fraction=0.99), timeout_s=1.0)
    late = [r for r in rows if r.outcome != "worker_died"]
    assert len(late) >= 15 and all(r.outcome == "timeout" for r in late)
    assert all(abs((r.end_at - r.start_at) - 1.0) < 1e-9 for r in late)
