"""The simulated runtime's clock at an edge (runtime/simulated.py ``_advance_to``): an attempt whose start falls
exactly at the end of a pre-warm wait has started when the wait returns, so it reads what the Store held then."""

from __future__ import annotations

from nimbus.config.simulation import DurationModel, SimulationConfig
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionContext, FunctionSpec, Resources
from nimbus.runtime.simulated import SimulatedRuntime

BOARD: dict[str, int] = {}


def reads_board(*, context: FunctionContext, request: Message) -> Message:
    return Message(header={"seen": BOARD.get("v", 0)})


def test_an_attempt_starting_exactly_when_a_prewarm_wait_ends_has_started_by_then() -> None:
    BOARD.clear()
    config = SimulationConfig(functions={"actor": DurationModel(median_s=1.0, cold_start_s=2.0)},
                              default=DurationModel(median_s=1.0, cold_start_s=0.0))
    runtime = SimulatedRuntime(ledger=Ledger(), simulation=config, capacity_cpus=None, max_workers=None,
                               keep_alive_s=600.0, seed=0)
    spec = FunctionSpec(name="reader", entrypoint=f"{__name__}:reads_board", kind="actor", resources=Resources(cpus=1))
    future = runtime.invoke(spec=spec, request=Message())
    assert not runtime.advance(until_s=0.0)   # dispatched: a cold worker, ready (and the attempt's start) at 2 s
    runtime.prewarm(spec=spec, count=0, wait_s=10.0)   # waits until the invocation's cold worker is ready: t = 2 s
    assert runtime.now_s() == 2.0
    BOARD["v"] = 1                                      # written after the wait: the attempt started before it
    assert future.result().header["seen"] == 0
    runtime.shutdown()
