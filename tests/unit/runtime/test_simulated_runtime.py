"""The simulated runtime (runtime/simulated.py): virtual time, simulated-start execution order, delivery in
simulated-end order, capacity and queueing, cold starts and keep-alive, retries of simulated deaths and timeouts,
the ledger in simulated seconds, determinism, and no real clock in the simulated path."""

from __future__ import annotations

import ast
import queue
from pathlib import Path

import numpy as np
import pytest

from nimbus.config.simulation import DurationModel, SimulationConfig
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.errors import FunctionFailed
from nimbus.runtime.base import FunctionContext, FunctionSpec, Resources
from nimbus.runtime.factory import StampedRuntime
from nimbus.runtime.simulated import SimFuture, SimulatedRuntime
from nimbus.runtime.simulated_durations import draw_attempt

STARTS: list[tuple[str, int]] = []   # (function, header["i"]) in the order the functions really ran
BOARD: dict[str, int] = {}           # what functions read and write: stands for the Store


def record(*, context: FunctionContext, request: Message) -> Message:
    STARTS.append((context.function, int(request.header["i"])))
    return Message(header={"i": request.header["i"], "seen": BOARD.get("v", 0), "work_s": 123.0})


def publish(*, context: FunctionContext, request: Message) -> Message:
    BOARD["v"] = int(request.header["v"])
    return Message(header={"v": BOARD["v"]})


def rows(*, context: FunctionContext, request: Message) -> Message:
    return Message(header={"calls": context.cache.setdefault("n", 0)},
                   arrays={"x": np.zeros((int(request.header["rows"]), 2), dtype=np.float32)})


def always_fails(*, context: FunctionContext, request: Message) -> Message:
    raise ValueError("always")


def spec(name: str, fn: str = "record", *, kind: str = "actor", cpus: float = 1.0, retries: int = 3,
         timeout_s: float = 60.0) -> FunctionSpec:
    return FunctionSpec(name=name, entrypoint=f"{__name__}:{fn}", kind=kind,
                        resources=Resources(cpus=cpus), max_retries=retries, timeout_s=timeout_s)


def sim(*, models: dict[str, DurationModel] | None = None, capacity: float | None = None, keep_alive_s: float = 600.0,
        seed: int = 0, ledger: Ledger | None = None) -> SimulatedRuntime:
    config = SimulationConfig(functions=models or {}, default=DurationModel(median_s=1.0, cold_start_s=0.0))
    return SimulatedRuntime(ledger=ledger or Ledger(), simulation=config, capacity_cpus=capacity, max_workers=None,
                            keep_alive_s=keep_alive_s, seed=seed)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    STARTS.clear()
    BOARD.clear()


def test_results_come_in_simulated_end_order_and_the_clock_jumps_to_each() -> None:
    runtime = sim(models={"actor": DurationModel(median_s=3.0, cold_start_s=0.0),
                          "learner": DurationModel(median_s=1.0, cold_start_s=0.0)})
    events = runtime.event_queue()
    slow = runtime.invoke(spec=spec("slow"), request=Message(header={"i": 0}))
    fast = runtime.invoke(spec=spec("fast", kind="learner"), request=Message(header={"i": 1}))
    for name, future in (("slow", slow), ("fast", fast)):
        future.add_done_callback(lambda f, name=name: events.put((name, runtime.now_s())))
    assert runtime.now_s() == 0.0
    assert events.get(timeout=5.0) == ("fast", 1.0)   # submitted second, ends first
    assert events.get(timeout=5.0) == ("slow", 3.0)
    assert STARTS == [("slow", 0), ("fast", 1)]        # both started at 0, in submission order
    rows_ = {r.function: r for r in runtime._ledger.records()}
    assert (rows_["slow"].start_at, rows_["slow"].end_at, rows_["slow"].duration_s) == (0.0, 3.0, 3.0)
    assert (rows_["fast"].start_at, rows_["fast"].end_at) == (0.0, 1.0)
    runtime.shutdown()


def test_a_wait_with_a_timeout_ends_at_its_deadline_in_simulated_time() -> None:
    """A workflow polls its time triggers after each wait: a wait for a 3 s function with a 0.5 s timeout returns
    empty at 0.5 s (as a real wait would), not at the function's end; the function still ends at 3 s."""
    runtime = sim(models={"actor": DurationModel(median_s=3.0, cold_start_s=0.0)})
    events = runtime.event_queue()
    runtime.invoke(spec=spec("slow"), request=Message(header={"i": 0})).add_done_callback(
        lambda f: events.put(("slow", runtime.now_s())))
    waits, got = [], None
    while got is None:
        try:
            got = events.get(timeout=0.5)
        except queue.Empty:
            waits.append(runtime.now_s())
    assert waits == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert got == ("slow", 3.0) and runtime.now_s() == 3.0
    runtime.shutdown()


def test_an_invocation_reads_its_inputs_at_its_simulated_start() -> None:
    """A reader queued behind a capacity limit starts after the writer has run, and sees its write; a reader
    started at the same moment as the writer ran before it (execution follows simulated start order)."""
    runtime = sim(capacity=1.0)
    writer = runtime.invoke(spec=spec("w", "publish"), request=Message(header={"v": 7}))
    reader = runtime.invoke(spec=spec("r"), request=Message(header={"i": 0}))
    assert reader.result().header["seen"] == 7 and writer.done()
    assert runtime.now_s() == 2.0   # one CPU: the reader waited for the writer's second
    early = sim()
    first = early.invoke(spec=spec("r"), request=Message(header={"i": 1}))
    early.invoke(spec=spec("w", "publish"), request=Message(header={"v": 9}))
    assert first.result().header["seen"] == 7   # BOARD from before; it started first, at the same moment
    runtime.shutdown()
    early.shutdown()


def test_a_cold_start_delays_execution_past_a_later_warm_start() -> None:
    """The reader is dispatched first but cold (2 s), the writer second and at once: the writer runs first."""
    runtime = sim(models={"actor": DurationModel(median_s=1.0, cold_start_s=2.0),
                          "learner": DurationModel(median_s=1.0, cold_start_s=0.0)})
    reader = runtime.invoke(spec=spec("r"), request=Message(header={"i": 0}))
    runtime.invoke(spec=spec("w", "publish", kind="learner"), request=Message(header={"v": 5}))
    assert reader.result().header["seen"] == 5 and runtime.now_s() == 3.0
    runtime.shutdown()


def test_capacity_queues_invocations_and_the_ledger_shows_the_wait() -> None:
    ledger = Ledger()
    runtime = sim(capacity=2.0, ledger=ledger)
    futures = runtime.map(spec=spec("a"), requests=[Message(header={"i": i}) for i in range(5)])
    assert [f.result().header["i"] for f in futures] == list(range(5))
    starts = sorted((r.start_at, r.end_at, r.queued_at) for r in ledger.records())
    assert starts == [(0.0, 1.0, 0.0), (0.0, 1.0, 0.0), (1.0, 2.0, 0.0), (1.0, 2.0, 0.0), (2.0, 3.0, 0.0)]
    assert runtime.now_s() == 3.0
    runtime.shutdown()


def test_cold_start_then_warm_and_keep_alive_reclaims_in_virtual_time() -> None:
    ledger = Ledger()
    runtime = sim(models={"actor": DurationModel(median_s=1.0, cold_start_s=0.5)}, keep_alive_s=10.0, ledger=ledger)
    events = runtime.event_queue()
    runtime.invoke(spec=spec("a"), request=Message(header={"i": 0})).result()
    runtime.invoke(spec=spec("a"), request=Message(header={"i": 1})).result()
    with pytest.raises(queue.Empty):
        events.get(timeout=30.0)     # nothing in flight: the driver's wait times out in virtual time
    assert runtime.now_s() == pytest.approx(32.5)
    runtime.invoke(spec=spec("a"), request=Message(header={"i": 2})).result()
    records = ledger.records()
    assert [r.cold for r in records] == [True, False, True]   # the idle worker was reclaimed after 10 s
    assert [r.start_at for r in records] == [0.5, 1.5, 33.0]  # a cold start delays the function by 0.5 s
    assert records[0].billed_s == pytest.approx(1.5) and records[1].billed_s == pytest.approx(1.0)
    runtime.shutdown()


def test_simulated_deaths_are_retried_and_each_invocation_delivers_once() -> None:
    ledger = Ledger()
    runtime = sim(models={"actor": DurationModel(median_s=1.0, cold_start_s=0.0, failure_fraction=0.5)},
                  ledger=ledger)
    futures = runtime.map(spec=spec("a", retries=20), requests=[Message(header={"i": i}) for i in range(20)])
    results = [f.result() for f in futures]
    assert [r.header["i"] for r in results] == list(range(20))
    died = [r for r in ledger.records() if r.outcome == "worker_died"]
    assert died and len({r.invocation_id for r in ledger.records() if r.outcome == "ok"}) == 20
    assert sorted(r.header["_invocation_id"] for r in results) == sorted({r.invocation_id for r in ledger.records()})
    assert all(r.end_at - r.start_at <= 1.0 for r in died)   # a death is part-way through the attempt
    by_id = {(r.invocation_id, r.attempt): r for r in ledger.records()}
    for retry in (r for r in ledger.records() if r.attempt > 1):   # queued again when the death was seen
        assert retry.queued_at == by_id[(retry.invocation_id, retry.attempt - 1)].end_at
    assert runtime.stats().retries == len(died)
    runtime.shutdown()


def test_a_simulated_timeout_is_retried_then_fails() -> None:
    ledger = Ledger()
    runtime = sim(models={"actor": DurationModel(median_s=5.0, cold_start_s=0.0)}, ledger=ledger)
    future = runtime.invoke(spec=spec("a", retries=1, timeout_s=2.0), request=Message(header={"i": 0}))
    with pytest.raises(FunctionFailed) as failed:
        future.result()
    assert failed.value.error_type == "FunctionTimeout"
    assert [(r.outcome, r.start_at, r.end_at, r.billed_s) for r in ledger.records()] == \
        [("timeout", 0.0, 2.0, 2.0), ("timeout", 2.0, 4.0, 2.0)]
    error = runtime.invoke(spec=spec("b", "always_fails", retries=0), request=Message())
    with pytest.raises(FunctionFailed) as raised:
        error.result()
    assert raised.value.error_type == "ValueError"
    runtime.shutdown()


def test_result_timings_are_simulated_and_rows_and_bytes_add_their_terms() -> None:
    model = DurationModel(median_s=1.0, per_row_s=0.01, bandwidth_bytes_per_s=1e6, cold_start_s=0.0)
    runtime = sim(models={"actor": model})
    result = runtime.invoke(spec=spec("a", "rows"), request=Message(header={"rows": 100})).result()
    record = runtime._ledger.records()[0]
    assert record.duration_s > 2.0   # 1 s + 100 rows x 0.01 s + the bytes over 1 MB/s
    header = runtime.invoke(spec=spec("b"), request=Message(header={"i": 0})).result().header
    assert header["work_s"] == pytest.approx(runtime._ledger.records()[1].duration_s)
    assert header["work_s"] < 2  # simulated
    assert result.arrays["x"].shape == (100, 2)
    runtime.shutdown()


def test_lognormal_durations_stragglers_and_the_same_draws_for_the_same_seed() -> None:
    model = DurationModel(distribution="lognormal", median_s=2.0, sigma=0.5, straggler_fraction=0.2,
                          straggler_factor=10.0)
    draws = [draw_attempt(model=model, rng=np.random.default_rng(3), rows=0, nbytes=0) for _ in range(2)]
    assert draws[0] == draws[1]
    rng = np.random.default_rng(0)
    many = [draw_attempt(model=model, rng=rng, rows=0, nbytes=0) for _ in range(4000)]
    plain = [d.duration_s for d in many if not d.straggler]
    assert np.median(plain) == pytest.approx(2.0, rel=0.05)
    assert np.std(np.log(plain)) == pytest.approx(0.5, rel=0.05)
    assert np.mean([d.straggler for d in many]) == pytest.approx(0.2, abs=0.03)

    def run(seed: int) -> list[tuple[float, float]]:
        runtime = sim(models={"actor": model}, seed=seed)
        for f in runtime.map(spec=spec("a"), requests=[Message(header={"i": i}) for i in range(8)]):
            f.result()
        return [(r.start_at, r.end_at) for r in runtime._ledger.records()]

    assert run(1) == run(1) and run(1) != run(2)


def test_max_workers_evicts_the_longest_idle_worker_for_a_new_one() -> None:
    ledger = Ledger()
    config = SimulationConfig(default=DurationModel(median_s=1.0, cold_start_s=0.5))
    runtime = SimulatedRuntime(ledger=ledger, simulation=config, capacity_cpus=None, max_workers=1,
                               keep_alive_s=600.0, seed=0)
    for name in ("a", "b", "a"):
        runtime.invoke(spec=spec(name), request=Message(header={"i": 0})).result()
    assert [r.cold for r in ledger.records()] == [True, True, True]   # one worker kept: each switch is cold
    assert runtime.stats().workers_alive == 1
    runtime.shutdown()


def test_the_stamped_runtime_passes_the_clock_and_event_queue_through() -> None:
    runtime = sim()
    stamped = StampedRuntime(inner=runtime, headers={"_store": {}})
    assert stamped.now_s() == 0.0 and stamped.event_queue().empty()
    future = stamped.invoke(spec=spec("a"), request=Message(header={"i": 0}))
    assert future.result().header["i"] == 0 and stamped.now_s() == 1.0
    runtime.shutdown()


def test_prewarm_bills_cold_starts_then_provisioned_time_in_simulated_seconds() -> None:
    ledger = Ledger()
    runtime = sim(models={"actor": DurationModel(median_s=1.0, cold_start_s=2.0)}, ledger=ledger)
    runtime.prewarm(spec=spec("a"), count=2, wait_s=60.0)
    assert runtime.now_s() == 2.0
    runtime.invoke(spec=spec("a"), request=Message(header={"i": 0})).result()
    runtime.bill_provisioned()
    prewarms = [r for r in ledger.records() if r.outcome == "prewarm"]
    assert sorted((r.cold, r.billed_s) for r in prewarms) == [(False, 1.0), (False, 1.0), (True, 2.0), (True, 2.0)]
    assert [r.cold for r in ledger.records() if r.outcome == "ok"] == [False]
    runtime.shutdown()


def test_waiting_on_a_result_nothing_will_deliver_is_an_error_not_a_hang() -> None:
    runtime = sim()
    with pytest.raises(RuntimeError, match="nothing in flight"):
        SimFuture(runtime=runtime).result()
    future = runtime.invoke(spec=spec("a"), request=Message(header={"i": 0}))
    runtime.shutdown()
    assert future.cancelled()


SIMULATED_PATH = ("simulated.py", "simulated_pool.py", "simulated_durations.py")


def test_the_simulated_path_reads_no_real_clock() -> None:
    """Time in the simulation comes from the virtual clock only: the modules import neither time nor datetime."""
    folder = Path(__file__).resolve().parents[3] / "src" / "nimbus" / "runtime"
    for name in SIMULATED_PATH:
        tree = ast.parse((folder / name).read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(name=node.module or "")])}
        assert not imported & {"time", "datetime"}, f"{name} imports a real clock"


def test_first_call_s_is_paid_once_per_worker_and_per_row_time_is_inside_the_lognormal() -> None:
    ledger = Ledger()
    runtime = sim(models={"actor": DurationModel(median_s=1.0, first_call_s=0.5, cold_start_s=0.0)}, ledger=ledger)
    for i in range(3):
        runtime.invoke(spec=spec("a"), request=Message(header={"i": i})).result()
    assert [r.duration_s for r in ledger.records()] == pytest.approx([1.5, 1.0, 1.0])
    runtime.shutdown()
    model = DurationModel(distribution="lognormal", median_s=0.001, per_row_s=0.01, sigma=0.3)
    rng = np.random.default_rng(0)
    logs = np.log([draw_attempt(model=model, rng=rng, rows=100, nbytes=0).duration_s for _ in range(3000)])
    assert np.exp(np.median(logs)) == pytest.approx(1.001, rel=0.05) and logs.std() == pytest.approx(0.3, rel=0.1)


def test_a_learner_pays_its_cold_start_once_over_many_sync_rounds_under_keep_alive() -> None:
    """Alternating actor and learner calls, as onpolicy rounds do: one cold start each, billed once."""
    ledger = Ledger()
    runtime = sim(models={"actor": DurationModel(median_s=0.1, cold_start_s=0.2),
                          "learner": DurationModel(median_s=0.3, cold_start_s=1.04)}, keep_alive_s=600.0, ledger=ledger)
    for i in range(20):
        runtime.invoke(spec=spec("a"), request=Message(header={"i": i})).result()
        runtime.invoke(spec=spec("l", kind="learner"), request=Message(header={"i": i})).result()
    learners = [r for r in ledger.records() if r.kind == "learner"]
    assert [r.cold for r in learners].count(True) == 1
    assert sum(r.init_s for r in learners) == pytest.approx(1.04)
    assert runtime.now_s() == pytest.approx(0.2 + 1.04 + 20 * 0.4)
    runtime.shutdown()
