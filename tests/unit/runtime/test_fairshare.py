"""Fair share of one pool between workloads (runtime/fairshare.py) and the ledger's split by workload."""

from __future__ import annotations

from pathlib import Path

from nimbus.cost.ledger import Ledger, attempt_record
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.fairshare import fair_pick


def test_pick_is_fifo_without_weights_and_the_least_loaded_workload_with_them() -> None:
    assert fair_pick(queued=["a", "b"], busy_cpus={"b": 0.0}, weights={}) == 0
    assert fair_pick(queued=["a", "a", "b", "b"], busy_cpus={"a": 2.0}, weights={"a": 1.0, "b": 1.0}) == 2
    assert fair_pick(queued=["a", "b"], busy_cpus={"a": 2.0, "b": 1.0}, weights={"a": 3.0, "b": 1.0}) == 0  # 2/3 < 1
    assert fair_pick(queued=["a", "b"], busy_cpus={}, weights={"a": 1.0, "b": 1.0}) == 0   # tie: the oldest


def _simulate(*, weights: dict[str, float], capacity: int, steps: int) -> dict[str, int]:
    """Both workloads always backlogged, unit tasks of one CPU, one task finishes (the oldest) per step."""
    running: list[str] = []
    served = dict.fromkeys(weights, 0)
    for _ in range(steps):
        while len(running) < capacity:
            busy = {w: float(running.count(w)) for w in weights}
            queued = [w for w in sorted(weights) for _ in range(3)]
            workload = queued[fair_pick(queued=queued, busy_cpus=busy, weights=weights)]
            running.append(workload)
            served[workload] += 1
        running.pop(0)
    return served


def test_backlogged_workloads_hold_cpus_in_proportion_to_their_weights() -> None:
    equal = _simulate(weights={"a": 1.0, "b": 1.0}, capacity=4, steps=400)
    assert abs(equal["a"] - equal["b"]) <= 2
    skewed = _simulate(weights={"a": 1.0, "b": 3.0}, capacity=4, steps=400)
    assert abs(skewed["b"] / skewed["a"] - 3.0) < 0.1


def test_pool_ledger_rows_carry_their_workload_and_split_into_each_workloads_ledger(tmp_path: Path) -> None:
    pool = Ledger(path=tmp_path / "pool.jsonl")
    own = {name: Ledger(path=tmp_path / f"{name}.jsonl") for name in ("a", "b")}
    pool.by_workload.update(own)
    for i, workload in enumerate(["a", "b", "a"]):
        spec = FunctionSpec(name=f"{workload}/actor", entrypoint="x:y", resources=Resources(cpus=1.0),
                            kind="actor", workload=workload)
        pool.append(record=attempt_record(spec=spec, invocation_id=str(i), attempt=1, worker_id="w", cold=False,
                                          init_s=0.0, queued_at=0.0, start_at=0.0, end_at=1.0 + i, outcome="ok",
                                          error_type=None))
    assert [r.workload for r in Ledger.load(path=tmp_path / "pool.jsonl")] == ["a", "b", "a"]
    assert [r.invocation_id for r in own["a"].records()] == ["0", "2"] and len(own["b"].records()) == 1
    billed = {name: sum(r.billed_s for r in ledger.records()) for name, ledger in own.items()}
    assert billed["a"] + billed["b"] == sum(r.billed_s for r in pool.records())


def test_next_index_counts_busy_cpus_per_workload_from_the_slots() -> None:
    """What both runtimes schedule with: busy slots' cpus summed per workload, idle slots ignored."""
    from types import SimpleNamespace as NS

    from nimbus.runtime.fairshare import next_index

    def spec(workload: str, cpus: float) -> NS:
        return NS(workload=workload, resources=NS(cpus=cpus))

    slots = [NS(spec=spec("a", 1.0), attempt=object()), NS(spec=spec("b", 1.0), attempt=object()),
             NS(spec=spec("b", 1.0), attempt=None)]  # b: 1 busy cpu, a: 1 busy cpu
    queue = [NS(spec=spec("b", 1.0)), NS(spec=spec("a", 1.0))]
    assert next_index(queue=queue, slots=slots, weights={"a": 1.0, "b": 1.0}) == 0  # tie: the oldest
    assert next_index(queue=queue, slots=slots, weights={"a": 2.0, "b": 1.0}) == 1  # a's share is double
    assert next_index(queue=queue, slots=slots, weights={}) == 0
    slots.append(NS(spec=spec("b", 2.0), attempt=object()))
    assert next_index(queue=queue, slots=slots, weights={"a": 1.0, "b": 1.0}) == 1


def test_without_weights_the_pick_is_fifo_however_busy_the_oldest_workload_is() -> None:
    assert fair_pick(queued=["a", "b"], busy_cpus={"a": 4.0}, weights={}) == 0


def test_a_workload_without_a_weight_of_its_own_weighs_one() -> None:
    """Untagged functions (workload "") and workloads left out of the weights share the pool with weight 1:
    a at 2 busy CPUs / weight 2 = 1.0 goes before b at 1.5 / 1 and before the untagged "" at 1.2 / 1."""
    busy = {"a": 2.0, "b": 1.5, "": 1.2}
    assert fair_pick(queued=["b", "", "a"], busy_cpus=busy, weights={"a": 2.0}) == 2
    assert fair_pick(queued=["b", ""], busy_cpus=busy, weights={"a": 2.0}) == 1


def test_next_index_weighs_busy_cpus_not_busy_workers() -> None:
    """ARTOS's share is of CPUs: one 4-CPU learner of a outweighs two 1-CPU actors of b."""
    from types import SimpleNamespace as NS

    from nimbus.runtime.fairshare import next_index

    def slot(workload: str, cpus: float) -> NS:
        return NS(spec=NS(workload=workload, resources=NS(cpus=cpus)), attempt=object())

    slots = [slot("a", 4.0), slot("b", 1.0), slot("b", 1.0)]
    queue = [NS(spec=NS(workload="a")), NS(spec=NS(workload="b"))]
    assert next_index(queue=queue, slots=slots, weights={"a": 1.0, "b": 1.0}) == 1
    assert next_index(queue=queue, slots=slots, weights={"a": 3.0, "b": 1.0}) == 0   # 4/3 < 2
