"""The simulated runtime as a shared pool (runtime/simulated.py, simulated_pool.py): fair share between workloads
(``set_shares``) and the on-demand device pool, both in simulated seconds. Durations are constant, so every start
and end below is derived by hand in the test's comment."""

from __future__ import annotations

import queue

import pytest

from nimbus.config.simulation import DurationModel, SimulationConfig
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionContext, FunctionSpec, Resources
from nimbus.runtime.simulated import SimulatedRuntime
from nimbus.runtime.simulated_pool import simulated_devices


def where(*, context: FunctionContext, request: Message) -> Message:
    return Message(header={"device": context.device or ""})


def spec(*, workload: str, kind: str = "actor") -> FunctionSpec:
    return FunctionSpec(name=f"{workload}/{kind}", entrypoint=f"{__name__}:where", kind=kind, workload=workload,
                        resources=Resources(cpus=1.0))


def sim(*, capacity: float | None, slots: int | None = None) -> SimulatedRuntime:
    models = {"actor": DurationModel(median_s=1.0, cold_start_s=0.0),
              "learner": DurationModel(median_s=3.0, cold_start_s=0.0)}
    devices = None if slots is None else simulated_devices(slots=slots, kinds=frozenset({"learner"}))
    return SimulatedRuntime(ledger=Ledger(), simulation=SimulationConfig(functions=models), capacity_cpus=capacity,
                            max_workers=None, keep_alive_s=600.0, seed=0, devices=devices)


def _ends(runtime: SimulatedRuntime, workload: str) -> list[float]:
    return sorted(r.end_at for r in runtime._ledger.records() if r.workload == workload and r.outcome == "ok")


def test_fair_share_interleaves_two_backlogged_workloads_on_two_cpus() -> None:
    """a queues 4 one-second calls, then b 2, on 2 CPUs. FIFO: a's run 0-1 and 1-2, b's 2-3. Fair share (weights
    1:1): each workload holds one CPU while both are backlogged, so b's end at 1 and 2, a's at 1, 2, 3, 3."""
    ends = {}
    for weights in ({}, {"a": 1.0, "b": 1.0}):
        runtime = sim(capacity=2.0)
        runtime.set_shares(weights=weights)
        futures = [runtime.invoke(spec=spec(workload=w), request=Message()) for w in "aaaabb"]
        for future in futures:
            future.result()
        ends[bool(weights)] = (_ends(runtime, "a"), _ends(runtime, "b"), runtime.now_s())
        runtime.shutdown()
    assert ends[False] == ([1.0, 1.0, 2.0, 2.0], [3.0, 3.0], 3.0)
    assert ends[True] == ([1.0, 2.0, 3.0, 3.0], [1.0, 2.0], 3.0)


def test_weights_divide_the_cpus_in_proportion() -> None:
    """Weights 3:1 on 4 CPUs, both backlogged with 8 calls: while both are, a holds 3 CPUs and b 1 (a's ends at 1
    and 2: three each; b's: one each); at 2 a's last 2 calls and 2 of b's run, then b's last 4."""
    runtime = sim(capacity=4.0)
    runtime.set_shares(weights={"a": 3.0, "b": 1.0})
    futures = [runtime.invoke(spec=spec(workload=w), request=Message()) for w in "a" * 8 + "b" * 8]
    for future in futures:
        future.result()
    assert _ends(runtime, "a") == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0]
    assert _ends(runtime, "b") == [1.0, 2.0, 3.0, 3.0, 4.0, 4.0, 4.0, 4.0]
    runtime.shutdown()


def test_one_simulated_device_serialises_learners_and_leases_are_simulated_seconds() -> None:
    """Two workloads' learners (3 s) and actors (1 s) at 0, no CPU limit, one device: the learners take turns on it
    (a 0-3, b 3-6), the actors never wait for it; each learner row names its device and lease in simulated seconds
    and the function computes with ``context.device`` set."""
    runtime = sim(capacity=None, slots=1)
    futures = {f"{w}/{kind}": runtime.invoke(spec=spec(workload=w, kind=kind), request=Message())
               for w in "ab" for kind in ("learner", "actor")}
    assert futures["b/learner"].result().header["device"] == "cpu:0"
    assert futures["a/actor"].result().header["device"] == ""
    rows = {r.function: r for r in runtime._ledger.records()}
    assert (rows["a/learner"].start_at, rows["a/learner"].end_at) == (0.0, 3.0)
    assert (rows["b/learner"].queued_at, rows["b/learner"].start_at, rows["b/learner"].end_at) == (0.0, 3.0, 6.0)
    assert (rows["b/learner"].device, rows["b/learner"].lease_start_at, rows["b/learner"].lease_end_at) == \
        ("cpu:0", 3.0, 6.0)
    assert (rows["a/actor"].end_at, rows["b/actor"].end_at, rows["b/actor"].device) == (1.0, 1.0, "")
    assert runtime._devices.held_s_by_workload == {"a": 3.0, "b": 3.0}
    runtime.shutdown()


def test_a_learner_in_flight_at_shutdown_gives_its_device_back_at_the_simulated_now() -> None:
    runtime = sim(capacity=None, slots=1)
    events = runtime.event_queue()
    runtime.invoke(spec=spec(workload="a", kind="learner"), request=Message())
    with pytest.raises(queue.Empty):     # nothing ends by 1 s: the clock stands at 1 s, as a real wait times out
        events.get(timeout=1.0)
    runtime.shutdown()
    (row,) = runtime._ledger.records()
    assert (row.outcome, row.lease_start_at, row.lease_end_at) == ("cancelled", 0.0, 1.0)
    assert runtime._devices.free() == 1
