"""The on-demand device pool (runtime/devices.py, ARTOS 4.3): lease accounting, and time multiplexing of more
learners than device slots on the local runtime, with each lease in the ledger."""

from __future__ import annotations


import pytest

from nimbus.config.devices import DevicesConfig
from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.devices import DevicePool, device_pool, pool_devices

LEARNER = FunctionSpec(name="learner", entrypoint="nimbus.runtime.builtin:sleep", kind="learner", timeout_s=20.0,
                       resources=Resources(cpus=1))
ACTOR = FunctionSpec(name="actor", entrypoint="nimbus.runtime.builtin:sleep", kind="actor", timeout_s=20.0,
                     resources=Resources(cpus=1))


def test_pool_devices_are_gpus_when_visible_else_cpu_slots() -> None:
    assert pool_devices(kind="auto", cpu_slots=2, cuda_count=0) == ("cpu:0", "cpu:1")
    assert pool_devices(kind="auto", cpu_slots=2, cuda_count=1) == ("cuda:0",)
    assert pool_devices(kind="cpu", cpu_slots=3, cuda_count=2) == ("cpu:0", "cpu:1", "cpu:2")
    with pytest.raises(ValueError):
        pool_devices(kind="cuda", cpu_slots=1, cuda_count=0)
    assert device_pool(config=DevicesConfig()) is None
    assert device_pool(config=DevicesConfig(pool="on_demand", kind="cpu", cpu_slots=2)).devices == ("cpu:0", "cpu:1")


def test_leases_are_exclusive_and_their_held_time_is_counted_per_workload() -> None:
    pool = DevicePool(devices=("cpu:0", "cpu:1"), kinds=frozenset({"learner", "parameter"}))
    assert pool.needs(spec=LEARNER) and not pool.needs(spec=ACTOR)
    a = pool.acquire(spec=FunctionSpec(name="a/learner", entrypoint="x", kind="learner", workload="a"),
                     invocation_id="i1", now=10.0)
    b = pool.acquire(spec=FunctionSpec(name="b/learner", entrypoint="x", kind="learner", workload="b"),
                     invocation_id="i2", now=11.0)
    assert (a.device, b.device) == ("cpu:0", "cpu:1") and pool.free() == 0
    assert pool.acquire(spec=LEARNER, invocation_id="i3", now=11.5) is None  # every device held
    pool.release(lease=a, now=12.5)
    pool.release(lease=a, now=99.0)  # a second release changes nothing
    assert a.end_at == 12.5 and pool.free() == 1
    c = pool.acquire(spec=LEARNER, invocation_id="i3", now=13.0)
    assert c.device == "cpu:0"  # the freed device is reused
    pool.release(lease=b, now=14.0)
    assert pool.held_s_by_workload == {"a": 2.5, "b": 3.0}
    assert pool.leases_granted == 3 and [lease.invocation_id for lease in pool.held()] == ["i3"]


def test_more_learners_than_slots_take_turns_while_actors_go_ahead(make_runtime) -> None:
    pool = DevicePool(devices=("cpu:0",), kinds=frozenset({"learner"}))
    runtime, ledger = make_runtime(capacity_cpus=4, max_workers=6, devices=pool)
    runtime.prewarm(spec=LEARNER, count=3, wait_s=30.0)
    runtime.prewarm(spec=ACTOR, count=1, wait_s=30.0)
    learners = [runtime.invoke(spec=LEARNER, request=Message(header={"seconds": 0.3})) for _ in range(3)]
    actor = runtime.invoke(spec=ACTOR, request=Message(header={"seconds": 0.0}))
    assert actor.result(timeout=10).header["device"] is None  # actors lease nothing and do not wait
    devices = [f.result(timeout=20).header["device"] for f in learners]
    assert devices == ["cpu:0"] * 3
    rows = [r for r in ledger.records() if r.outcome == "ok"]
    leases = sorted((r.lease_start_at, r.lease_end_at) for r in rows if r.kind == "learner")
    assert len(leases) == 3 and all(r.device == "cpu:0" for r in rows if r.kind == "learner")
    for (start, end), (next_start, _) in zip(leases, leases[1:]):
        assert end <= next_start  # one slot: leases never overlap (time multiplexing)
    for row in rows:
        if row.kind == "learner":  # the lease covers the run of the function
            assert row.lease_start_at <= row.start_at and row.end_at <= row.lease_end_at + 0.05
    actor_row = next(r for r in rows if r.kind == "actor")
    assert actor_row.device == "" and actor_row.lease_start_at is None
    assert actor_row.end_at < leases[-1][0]  # the actor finished before the last learner got the device
    assert pool.free() == 1 and pool.leases_granted == 3


def test_a_failed_attempt_gives_its_device_back(make_runtime) -> None:
    pool = DevicePool(devices=("cpu:0",), kinds=frozenset({"learner"}))
    runtime, ledger = make_runtime(capacity_cpus=2, devices=pool)
    failing = FunctionSpec(name="bad", entrypoint="nimbus.runtime.builtin:raise_error", kind="learner",
                           timeout_s=20.0, max_retries=0)
    with pytest.raises(Exception):
        runtime.invoke(spec=failing, request=Message(header={})).result(timeout=30)
    ok = runtime.invoke(spec=LEARNER, request=Message(header={"seconds": 0.0})).result(timeout=30)
    assert ok.header["device"] == "cpu:0" and pool.free() == 1
    failed = next(r for r in ledger.records() if r.function == "bad")
    assert failed.outcome == "error" and failed.device == "cpu:0" and failed.lease_end_at is not None
