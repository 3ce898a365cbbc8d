"""Triggers fire exactly when they should; the trigger table expresses a workflow as bindings."""

from __future__ import annotations

import numpy as np
import pytest

from nimbus.algos.base import KeySpec
from nimbus.data.buffer import Buffer
from nimbus.data.codec import Message
from nimbus.data.replay import FullBatch
from nimbus.data.store import ShmStore
from nimbus.data.triggers import DataKeyTrigger, ObjectKeyTrigger, StoreEvents, TimeTrigger, Trigger, TriggerTable

SPEC = {"obs": KeySpec(shape=(2,), dtype="float32"), "reward": KeySpec(shape=(), dtype="float32")}
BUFFER_ROWS, BUFFER_ACTORS = 64, 8  # the ``buf`` fixture's (tests/unit/data/conftest.py)


def ingest(buf: Buffer, *, inv: str, actor: int, n: int, version: int = 0) -> bool:
    return buf.ingest(invocation_id=inv, actor_rank=actor, policy_version=version,
                      arrays={"obs": np.zeros((n, 2)), "reward": np.zeros(n)})


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_triggers_are_triggers(buf: Buffer) -> None:
    triggers: list[Trigger] = [DataKeyTrigger(buffer=buf, n_actors=1, size_rows=1), TimeTrigger(period_s=1.0),
                               ObjectKeyTrigger(store_events=StoreEvents(), key_prefix="w")]
    assert len(triggers) == 3


def test_data_key_trigger_needs_n_actors_and_size_rows(buf: Buffer) -> None:
    trigger = DataKeyTrigger(buffer=buf, n_actors=2, size_rows=10)
    ingest(buf, inv="a", actor=0, n=10)
    assert not trigger.check(now_s=0) and trigger.pending() == (1, 10)  # one actor only
    ingest(buf, inv="a", actor=1, n=5)  # duplicate: dropped by the buffer, not counted
    assert not trigger.check(now_s=0)
    ingest(buf, inv="b", actor=1, n=1)
    assert trigger.check(now_s=0)
    assert not trigger.check(now_s=0) and trigger.pending() == (0, 0)  # re-armed
    ingest(buf, inv="c", actor=2, n=9)
    ingest(buf, inv="d", actor=3, n=1)
    assert trigger.check(now_s=0)


def test_data_key_trigger_reset_forgets_and_validates_keys(buf: Buffer) -> None:
    ingest(buf, inv="before", actor=0, n=4)
    trigger = DataKeyTrigger(buffer=buf, n_actors=1, size_rows=4, keys=("obs",))
    assert not trigger.check(now_s=0)  # rows from before the trigger existed do not count
    ingest(buf, inv="a", actor=0, n=3)
    trigger.reset()
    ingest(buf, inv="b", actor=0, n=3)
    assert not trigger.check(now_s=0)
    ingest(buf, inv="c", actor=0, n=1)
    assert trigger.check(now_s=0)
    with pytest.raises(ValueError, match="'action'"):
        DataKeyTrigger(buffer=buf, n_actors=1, size_rows=1, keys=("action",))
    with pytest.raises(ValueError):
        DataKeyTrigger(buffer=buf, n_actors=0, size_rows=1)


def test_data_key_trigger_on_an_attached_buffer(buf: Buffer) -> None:
    reader = Buffer.attach(descriptor=buf.descriptor())
    trigger = DataKeyTrigger(buffer=reader, n_actors=1, size_rows=2)
    ingest(buf, inv="a", actor=5, n=2)
    assert trigger.check(now_s=0)
    reader.close()


def test_object_key_trigger_fires_on_newer_keys_under_its_prefix() -> None:
    events = StoreEvents()
    trigger = ObjectKeyTrigger(store_events=events, key_prefix="weights/main")
    assert not trigger.check(now_s=0) and trigger.last_key is None
    events.notify(key="weights/main/1")
    assert trigger.check(now_s=0) and trigger.last_key == "weights/main/1"
    assert not trigger.check(now_s=0)
    events.notify(key="weights/main/0")       # older
    events.notify(key="weights/main2/5")      # another prefix
    events.notify(key="weights/main/best")    # not versioned
    assert not trigger.check(now_s=0)
    events.notify(key="weights/main/3")
    events.notify(key="weights/main/2")
    assert trigger.check(now_s=0) and trigger.last_key == "weights/main/3"
    events.notify(key="weights/main/4")
    trigger.reset()
    assert not trigger.check(now_s=0) and trigger.last_key == "weights/main/4"
    with pytest.raises(ValueError):
        events.notify(key="bad key/1")


def test_fresh_object_key_trigger_fires_for_the_newest_announced_key() -> None:
    events = StoreEvents()
    events.notify(key="weights/main/7")
    trigger = ObjectKeyTrigger(store_events=events, key_prefix="weights/main")
    assert trigger.check(now_s=0) and trigger.last_key == "weights/main/7"
    assert events.latest(prefix="weights") == "weights/main/7" and events.latest(prefix="grads") is None


def test_time_trigger_with_a_fake_clock() -> None:
    clock = FakeClock()
    trigger = TimeTrigger(period_s=1.0, clock=clock)
    assert [trigger.check(now_s=t) for t in (0.0, 0.5, 0.999, 1.0, 1.5, 2.0)] == [
        False, False, False, True, False, True]
    assert trigger.check(now_s=5.0)  # late: fires once, the next period starts at 5.0
    assert not trigger.check(now_s=5.5) and trigger.check(now_s=6.0)
    clock.now_s = 10.0
    trigger.reset()
    assert not trigger.check(now_s=10.9) and trigger.check(now_s=11.0)
    with pytest.raises(ValueError):
        TimeTrigger(period_s=0.0)


class Flag:
    """A trigger that fires while raised; counts checks."""

    def __init__(self, raised: bool = False) -> None:
        self.raised, self.checks = raised, 0

    def check(self, *, now_s: float) -> bool:
        self.checks += 1
        return self.raised

    def reset(self) -> None:
        self.raised = False


def test_table_runs_actions_in_binding_order() -> None:
    table, calls = TriggerTable(), []
    first, second, third = Flag(True), Flag(False), Flag(True)
    table.bind(name="c", trigger=first, action=lambda: calls.append("c"))
    table.bind(name="a", trigger=second, action=lambda: calls.append("a"))
    table.bind(name="b", trigger=third, action=lambda: calls.append("b"))
    assert table.poll(now_s=0) == ["c", "b"] and calls == ["c", "b"]
    with pytest.raises(ValueError, match="'a'"):
        table.bind(name="a", trigger=Flag(), action=lambda: None)
    table.unbind(name="c")
    assert [b.name for b in table.bindings] == ["a", "b"]
    table.reset()
    assert table.poll(now_s=0) == []
    with pytest.raises(KeyError):
        table.unbind(name="c")


def test_an_action_sees_earlier_actions_of_the_same_poll() -> None:
    table, later = TriggerTable(), Flag(False)
    table.bind(name="raise", trigger=Flag(True), action=lambda: setattr(later, "raised", True))
    table.bind(name="later", trigger=later, action=lambda: None)
    assert table.poll(now_s=0) == ["raise", "later"]


def test_reentrant_poll_is_deferred_to_another_pass() -> None:
    table, once = TriggerTable(), Flag(True)
    done = Flag(False)

    def action() -> None:
        once.raised = False
        done.raised = True
        assert table.poll(now_s=0) == []  # nested: deferred

    table.bind(name="done", trigger=done, action=lambda: setattr(done, "raised", False))
    table.bind(name="once", trigger=once, action=action)
    assert table.poll(now_s=0) == ["once", "done"]


def test_sync_on_policy_workflow_as_bindings(buf: Buffer) -> None:
    """ObjectKeyTrigger(weights) → invoke actors; DataKeyTrigger(n_actors, rows) → invoke learner."""
    store, events, strategy, n_actors, steps = ShmStore(owner=True), StoreEvents(), FullBatch(), 3, 4
    weights = ObjectKeyTrigger(store_events=events, key_prefix="weights/main")
    log: list[str] = []

    def put_weights(version: int) -> None:
        store.put(key=f"weights/main/{version}", message=Message(arrays={"w": np.full(2, version, np.float32)}))
        events.notify(key=f"weights/main/{version}")

    def invoke_actors() -> None:
        version = int(store.get(key=weights.last_key).arrays["w"][0])
        log.append(f"actors@{version}")
        for rank in reversed(range(n_actors)):  # finish order does not matter
            ingest(buf, inv=f"{version}/{rank}", actor=rank, n=steps, version=version)

    def invoke_learner() -> None:
        indices = strategy.select(buffer=buf)
        versions = set(buf.read_meta(indices=indices)["policy_version"].tolist())
        log.append(f"learner@{versions}")
        strategy.consumed(indices=indices)
        put_weights(max(versions) + 1)

    table = TriggerTable()
    table.bind(name="invoke_actors", trigger=weights, action=invoke_actors)
    table.bind(name="invoke_learner", trigger=DataKeyTrigger(buffer=buf, n_actors=n_actors, size_rows=n_actors * steps),
               action=invoke_learner)
    put_weights(0)
    fired = [table.poll(now_s=float(t)) for t in range(3)]
    assert fired == [["invoke_actors", "invoke_learner"]] * 3
    assert log == ["actors@0", "learner@{0}", "actors@1", "learner@{1}", "actors@2", "learner@{2}"]
    assert store.latest(prefix="weights/main") == "weights/main/3"
    store.close()
