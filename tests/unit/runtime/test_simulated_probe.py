"""A simulated Nitro learner's ``probe_s`` (runtime/simulated_durations.py ``with_probe``): with a ``probe`` model
named, the probe's seconds are their own draw, added to the learner's, so ``probe_s`` / the round is a share that
means something; without one, every ``*_s`` is the whole duration, as before."""

from __future__ import annotations

from nimbus.config.simulation import DurationModel, SimulationConfig
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionContext, FunctionSpec
from nimbus.runtime.simulated import SimulatedRuntime


def probed(*, context: FunctionContext, request: Message) -> Message:
    """Stands for a Nitro learner: its result's extras carry the probe's and the update's own timings."""
    return Message(header={"learning_s": 9.0, "extras": {"probe_s": 7.0, "hessian_ratio": 0.5}})


def _run(functions: dict[str, DurationModel]) -> tuple[dict, Ledger]:
    ledger = Ledger()
    runtime = SimulatedRuntime(ledger=ledger, simulation=SimulationConfig(functions=functions), capacity_cpus=None,
                               max_workers=None, keep_alive_s=600.0, seed=0)
    spec = FunctionSpec(name="learner", entrypoint=f"{__name__}:probed", kind="learner")
    header = runtime.invoke(spec=spec, request=Message()).result().header
    runtime.shutdown()
    return header, ledger


def test_a_named_probe_model_times_the_probe_apart_from_the_update() -> None:
    header, ledger = _run({"learner": DurationModel(median_s=2.0, cold_start_s=0.0),
                           "probe": DurationModel(median_s=0.25)})
    assert header["extras"]["probe_s"] == 0.25            # the probe's own draw (constant 0.25 s)
    assert header["learning_s"] == 2.25                    # the learner call: the update, then the probe
    assert header["extras"]["hessian_ratio"] == 0.5        # not a timing: untouched
    (row,) = ledger.records()
    assert row.duration_s == 2.25


def test_without_a_probe_model_probe_s_is_the_whole_duration_as_before() -> None:
    header, ledger = _run({"learner": DurationModel(median_s=2.0, cold_start_s=0.0)})
    assert (header["extras"]["probe_s"], header["learning_s"], ledger.records()[0].duration_s) == (2.0, 2.0, 2.0)
