"""A simulated duration longer than the backend can drive (the driver wakes every 0.5 simulated seconds while it
waits) is refused when the runtime is made, naming its key with a readable number, instead of a livelock."""

from __future__ import annotations

import pytest

from nimbus.config.simulation import DurationModel, SimulationConfig
from nimbus.cost.ledger import Ledger
from nimbus.errors import ConfigError
from nimbus.runtime.simulated import SimulatedRuntime


def _make(simulation: SimulationConfig) -> SimulatedRuntime:
    return SimulatedRuntime(ledger=Ledger(), simulation=simulation, capacity_cpus=None, max_workers=None,
                            keep_alive_s=600.0, seed=0)


@pytest.mark.parametrize(("simulation", "key"), [
    (SimulationConfig(default=DurationModel(cold_start_s=1e300)), "simulation.default.cold_start_s"),
    (SimulationConfig(functions={"actor": DurationModel(median_s=float(10 ** 300))}),
     "simulation.functions.actor.median_s"),
    (SimulationConfig(functions={"learner": DurationModel(first_call_s=1e9)}), "simulation.functions.learner"),
])
def test_an_oversized_duration_is_refused_readably(simulation: SimulationConfig, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _make(simulation)
    message = str(raised.value)
    assert key in message and "0000000000" not in message and len(message) < 200, message


def test_an_hour_is_still_allowed() -> None:
    _make(SimulationConfig(default=DurationModel(cold_start_s=3600.0, median_s=3600.0))).shutdown()
