"""Timers on the simulated runtime's virtual clock (``call_later``), ``prewarm`` starting workers as the local backend
does, and ARTOS's pre-warm trigger (runtime/prewarm.py) set on that clock when the runtime is simulated."""

from __future__ import annotations

import queue
from types import SimpleNamespace

import pytest

from nimbus.config.simulation import DurationModel, SimulationConfig
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.factory import StampedRuntime
from nimbus.runtime.prewarm import make_prewarmer
from nimbus.runtime.simulated import SimulatedRuntime

ACTOR = FunctionSpec(name="actor", entrypoint="nimbus.runtime.builtin:echo", kind="actor")
LEARNER = FunctionSpec(name="learner", entrypoint="nimbus.runtime.builtin:echo", kind="learner")


def sim(*, ledger: Ledger, max_workers: int | None = None, keep_alive_s: float = 600.0) -> SimulatedRuntime:
    config = SimulationConfig(functions={"actor": DurationModel(median_s=1.0, cold_start_s=0.5),
                                         "learner": DurationModel(median_s=4.0, cold_start_s=0.0)})
    return SimulatedRuntime(ledger=ledger, simulation=config, capacity_cpus=None, max_workers=max_workers,
                            keep_alive_s=keep_alive_s, seed=0)


def test_a_timer_runs_when_the_clock_reaches_it_and_a_cancelled_one_does_not_move_the_clock() -> None:
    runtime, fired = sim(ledger=Ledger()), []
    runtime.call_later(delay_s=0.7, callback=lambda: fired.append(runtime.now_s()))
    runtime.call_later(delay_s=0.9, callback=lambda: fired.append(-1.0)).cancel()
    runtime.invoke(spec=LEARNER, request=Message(header={})).result()      # ends at 4.0: the timer ran on the way
    assert fired == [0.7] and runtime.now_s() == 4.0
    runtime.call_later(delay_s=50.0, callback=lambda: fired.append(-1.0)).cancel()
    events = runtime.event_queue()
    with pytest.raises(queue.Empty):
        events.get()                      # nothing in flight: the cancelled timer is dropped, the clock stays
    assert runtime.now_s() == 4.0
    runtime.call_later(delay_s=2.0, callback=lambda: fired.append(runtime.now_s()))
    with pytest.raises(queue.Empty):
        events.get(timeout=1.0)           # the wait times out before the timer is due
    assert runtime.now_s() == 5.0 and fired == [0.7]
    with pytest.raises(queue.Empty):
        events.get(timeout=1.5)           # the timer runs at 6.0, the wait times out at 6.5
    assert fired == [0.7, 6.0] and runtime.now_s() == 6.5
    stamped = StampedRuntime(inner=runtime, headers={})   # a workflow's wrapped runtime: the same clock and timer
    stamped.call_later(delay_s=1.0, callback=lambda: fired.append(stamped.now_s()))
    with pytest.raises(queue.Empty):
        stamped.event_queue().get(timeout=2.0)   # the timer runs at 7.5 on the simulated clock, the wait ends at 8.5
    assert fired == [0.7, 6.0, 7.5] and stamped.now_s() == 8.5
    runtime.shutdown()


def test_prewarm_starts_count_more_workers_as_the_local_backend_does_within_max_workers() -> None:
    ledger = Ledger()
    runtime = sim(ledger=ledger, max_workers=3)
    runtime.prewarm(spec=ACTOR, count=2, wait_s=60.0)
    runtime.prewarm(spec=ACTOR, count=1)                  # one more, though two exist (the monitor's trigger asks so)
    assert len([r for r in ledger.records() if r.outcome == "prewarm" and r.cold]) == 3
    futures = [runtime.invoke(spec=ACTOR, request=Message(header={"i": i})) for i in range(3)]
    with pytest.raises(queue.Empty):
        runtime.event_queue().get(block=False)             # the three start now and hold every worker
    runtime.prewarm(spec=ACTOR, count=1)                  # max_workers full of busy workers: none started
    assert len([r for r in ledger.records() if r.outcome == "prewarm" and r.cold]) == 3
    assert runtime.stats().workers_alive == 3 and [f.result().header["i"] for f in futures] == [0, 1, 2]
    runtime.shutdown()


def test_the_pre_warm_trigger_fires_on_the_simulated_clock_while_the_driver_waits() -> None:
    """make_prewarmer on a simulated runtime: the round starts at 0; the monitor's windows (actor start-up 0.5 s,
    learner finish 4.0 s) put the trigger at 4.0 − 0.5 = 3.5 simulated seconds; it fires while the driver waits for the
    learner (4 s) and pre-warms the two actors, idle since 0, that a keep-alive of 1 s will have reclaimed by then."""
    ledger = Ledger()
    runtime = sim(ledger=ledger, keep_alive_s=1.0)
    config = SimpleNamespace(prewarm=SimpleNamespace(mode="monitor", window=2, stability=0.2),
                             runtime=SimpleNamespace(keep_alive_s=1.0))
    controller = make_prewarmer(config=config, runtime=StampedRuntime(inner=runtime, headers={}), ledger=ledger,
                                actor_spec=ACTOR, workload="w")
    for _ in range(2):
        controller.monitor.observe(workload="w", actor_start_s=0.5, learner_fin_s=4.0)
    controller.round_started(num_actors=2, idle_s=[0.0, 0.0])
    runtime.invoke(spec=LEARNER, request=Message(header={})).result()
    assert runtime.now_s() == 4.0 and controller.fired == 1 and controller.warmed == 2
    prewarms = [r for r in ledger.records() if r.outcome == "prewarm" and r.cold]
    assert [(r.function, r.queued_at, r.end_at) for r in prewarms] == [("actor", 3.5, 4.0)] * 2
    controller.round_finished()
    assert controller.monitor.windows(workload="w") == ([0.5, 0.5], [4.0, 4.0])   # the round, in simulated seconds
    controller.close()
    runtime.shutdown()
