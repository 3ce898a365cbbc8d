"""The on-demand device pool (runtime/devices.py, ARTOS 4.3): lease accounting, and time multiplexing of more
learners than device slots on the local runtime, with each lease in the ledger."""

from __future__ import annotations

import pytest
import torch

from nimbus.config.devices import DevicesConfig
from nimbus.data.codec import Message
from nimbus.errors import FunctionFailed
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.devices import PLACED_KEY, DevicePool, device_pool, lease_ended, place, pool_devices, torch_device

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
    for (_, end), (next_start, _) in zip(leases, leases[1:]):
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
    with pytest.raises(FunctionFailed):
        runtime.invoke(spec=failing, request=Message(header={})).result(timeout=30)
    ok = runtime.invoke(spec=LEARNER, request=Message(header={"seconds": 0.0})).result(timeout=30)
    assert ok.header["device"] == "cpu:0" and pool.free() == 1
    failed = next(r for r in ledger.records() if r.function == "bad")
    assert failed.outcome == "error" and failed.device == "cpu:0" and failed.lease_end_at is not None


# ---- a lease places work (issue 25.3) ------------------------------------------------------------------


def test_several_learners_share_one_gpu_by_a_config_line() -> None:
    assert pool_devices(kind="auto", cpu_slots=1, cuda_count=2, learners_per_device=2) == \
        ("cuda:0", "cuda:0", "cuda:1", "cuda:1")
    config = DevicesConfig(pool="on_demand", kind="cpu", cpu_slots=3, learners_per_device=4)
    assert device_pool(config=config).devices == ("cpu:0", "cpu:1", "cpu:2")  # CPU slots are cpu_slots
    pool = DevicePool(devices=("cuda:0", "cuda:0"), kinds=frozenset({"learner"}))
    spec = LEARNER
    first = pool.acquire(spec=spec, invocation_id="a", now=0.0)
    second = pool.acquire(spec=spec, invocation_id="b", now=0.0)
    assert (first.device, second.device) == ("cuda:0", "cuda:0")
    assert pool.acquire(spec=spec, invocation_id="c", now=0.0) is None
    pool.release(lease=first, now=1.0)
    assert pool.free() == 1 and pool.held() == [second]


def test_the_lease_decides_the_device_and_learner_device_only_without_one() -> None:
    assert torch_device(leased="cpu:3", requested="cuda") == torch.device("cpu")
    assert torch_device(leased="cuda:1", requested="cpu") == torch.device("cuda:1")
    assert torch_device(leased=None, requested="cpu") == torch.device("cpu")
    assert torch_device(leased=None, requested="auto") == \
        torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_place_moves_models_optimizer_state_and_cached_tensors_but_not_adams_step() -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    cache = {"model": model, "optimizer": optimizer, "models": {"peer": (("p", 1), torch.nn.Linear(2, 2))},
             "batch": ("key", {"obs": torch.ones(4)}), "rows": [torch.zeros(2)], "name": "x"}
    meta = torch.device("meta")  # a device other than the CPU that every torch build has
    assert place(cache=cache, device=meta)
    assert {p.device for p in model.parameters()} == {meta}
    assert cache["models"]["peer"][1].weight.device == meta
    assert cache["batch"][1]["obs"].device == meta and cache["rows"][0].device == meta
    for state in optimizer.state.values():
        assert state["exp_avg"].device == meta and state["exp_avg_sq"].device == meta
        assert state["step"].device.type == "cpu"  # torch keeps a non-capturable Adam's step on the CPU
    assert not place(cache=cache, device=meta)  # already there: nothing moves


class _Recording(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.moved_to: list[torch.device] = []

    def to(self, device: torch.device) -> _Recording:  # type: ignore[override]
        self.moved_to.append(device)
        return self


def test_a_cuda_lease_ends_with_the_models_off_the_device_and_its_peak_memory(monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: calls.append(f"peak {device}") or 4096)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))
    model = _Recording()
    cache = {"model": model, PLACED_KEY: "cuda:0"}
    assert lease_ended(device="cuda:0", cache=cache) == 4096
    assert model.moved_to == [torch.device("cpu")] and cache[PLACED_KEY] == "cpu"
    assert calls == ["peak cuda:0", "empty"]
    assert lease_ended(device="cpu:0", cache=cache) is None and model.moved_to == [torch.device("cpu")]
    assert lease_ended(device=None, cache=cache) is None
