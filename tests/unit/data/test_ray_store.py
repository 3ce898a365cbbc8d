"""The ``ray`` Store (object store + directory actor) and the Channel over Ray, on one shared local Ray."""

from __future__ import annotations

import queue
import sys
import time

import numpy as np
import pytest

from nimbus.data.codec import Message
from nimbus.data.store import KeyExists, KeyNotFound

pytestmark = pytest.mark.ray


@pytest.fixture(autouse=True)
def _ship_helpers_by_value(ray_local) -> None:
    """Ray workers cannot import this test module: send its helper tasks by value."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _writer(descriptor: dict, key: str) -> int:
    """A Ray task that opens the store from its descriptor, writes one value and exits."""
    from nimbus.data.stores import make_store

    make_store(descriptor=descriptor).put(key=key, message=Message(arrays={"w": np.full(4, 7.0, np.float32)}))
    return 1


def test_values_outlive_their_writer_and_are_addressed_by_key(ray_local) -> None:
    import ray

    from nimbus.data.ray_store import RayStore
    from nimbus.data.stores import store_descriptor

    store = RayStore.create(namespace="t-store")
    try:
        store.put(key="weights/main/0", message=Message(header={"v": 0}, arrays={"w": np.zeros(4, np.float32)}))
        writer = ray.remote(_writer)
        assert ray.get(writer.remote(store_descriptor(store), "weights/main/1")) == 1  # the writer is gone now
        assert store.latest(prefix="weights/main") == "weights/main/1"
        got = store.get(key="weights/main/1")
        assert np.array_equal(got.arrays["w"], np.full(4, 7.0)) and not got.arrays["w"].flags.writeable
        with pytest.raises(KeyExists):
            store.put(key="weights/main/1", message=Message())
        store.delete(key="weights/main/1")
        with pytest.raises(KeyNotFound):
            store.get(key="weights/main/1")
        store.delete(key="weights/main/1")   # absent now: a no-op (core.Store.delete)
        assert store.keys(prefix="") == ["weights/main/0"]
    finally:
        store.close()


def _attempt(descriptor: dict, key: str, writer: str, fill: float) -> int:
    """A Ray task standing for one attempt of a function: it puts as ``writer`` and exits."""
    from nimbus.data.stores import make_store, put_all

    put_all(store=make_store(descriptor=descriptor), items={key: Message(arrays={"w": np.full(2, fill, np.float32)})},
            writer=writer)
    return 1


def test_a_writer_may_replace_its_own_value_and_no_one_else_may(ray_local) -> None:
    """P1 on Ray: a retried attempt (same invocation id, another process) redoes its put; no one else may."""
    import ray

    from nimbus.data.ray_store import RayStore
    from nimbus.data.stores import store_descriptor

    store = RayStore.create(namespace="t-writer")
    attempt = ray.remote(_attempt)
    try:
        assert ray.get(attempt.remote(store_descriptor(store), "weights/main/1", "inv-a", 1.0)) == 1
        for intruder in (None, "inv-b"):
            with pytest.raises(KeyExists):
                store.put(key="weights/main/1", message=Message(), writer=intruder)
        assert ray.get(attempt.remote(store_descriptor(store), "weights/main/1", "inv-a", 2.0)) == 1  # the retry
        assert store.get(key="weights/main/1").arrays["w"].tolist() == [2.0, 2.0]
        store.put(key="weights/main/0", message=Message())  # no writer: nobody may replace it
        with pytest.raises(KeyExists):
            store.put(key="weights/main/0", message=Message(), writer="inv-a")
        store.delete(key="weights/main/1")
        store.put(key="weights/main/1", message=Message())  # deleted: free for anyone, the writer forgotten
        with pytest.raises(KeyExists):
            store.put(key="weights/main/1", message=Message(), writer="inv-a")
    finally:
        store.close()


def _send(mailbox, count: int, nbytes: int) -> float:
    from nimbus.data.ray_channel import RayOutbox

    outbox = RayOutbox(mailbox=mailbox, source="remote-sender", compress_min_bytes=None)
    started = time.perf_counter()
    for i in range(count):
        outbox.send(message=Message(header={"i": i}, arrays={"x": np.full(nbytes, i % 251, np.uint8)}), tag={"i": i})
    sent = time.perf_counter() - started
    outbox.close()
    return sent


def test_channel_over_ray_pushes_bodies_before_the_consumer_asks(ray_local) -> None:
    import ray

    from nimbus.data.ray_channel import RayInbox

    inbox = RayInbox(on_message=None)
    try:
        send_s = ray.get(ray.remote(_send).remote(inbox.mailbox, 8, 1 << 20))
        assert send_s < 2.0  # send() returns at once; the sender thread moves the bodies
        deadline = time.monotonic() + 30
        while inbox.received < 8 and time.monotonic() < deadline:  # pulled without anyone calling get()
            time.sleep(0.05)
        assert inbox.received == 8
        envelopes = [inbox.get(timeout_s=1.0) for _ in range(8)]
        assert [e.tag["i"] for e in envelopes] == list(range(8))  # in send order
        assert all(e.source == "remote-sender" and e.message.arrays["x"][0] == e.tag["i"] for e in envelopes)
        with pytest.raises(queue.Empty):
            inbox.get(timeout_s=0.1)
    finally:
        inbox.close()
