"""Opening stores from config and descriptors, the driver's mirror, and the runtime/store rules (no servers)."""

from __future__ import annotations

import numpy as np
import pytest

from nimbus.config import dump_config, parse_config
from nimbus.data.codec import Message
from nimbus.data.store import KeyNotFound, ShmStore
from nimbus.data.stores import MirroredStore, function_store, put_all, store_descriptor
from nimbus.errors import ConfigError, FunctionFailed, StoreFull, StoreUnavailable
from nimbus.roles.remote import store_failure
from nimbus.runtime.factory import StampedRuntime


def config(**sections) -> dict:
    return {"algo": {"name": "ppo"}, **sections}


@pytest.mark.parametrize(("sections", "message"), [
    ({"store": {"backend": "ray"}}, "store.backend: ray needs runtime.backend: ray"),
    ({"runtime": {"backend": "ray", "address": "auto"}}, "store.backend: shm is per machine"),
    ({"runtime": {"backend": "ray", "address": "10.0.0.1:6379"}, "store": {"backend": "redis", "fallback": "shm"}},
     "store.fallback: shm only works"),
    ({"store": {"backend": "redis", "password": "a", "password_env": "B"}}, "exclusive"),
    ({"store": {"backend": "redis", "url": "http://x"}}, "store.url"),
])
def test_impossible_runtime_store_combinations_are_refused_at_load(sections: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(data=config(**sections))


def test_the_password_is_never_saved_with_the_run() -> None:
    parsed = parse_config(data=config(store={"backend": "redis", "password": "hunter2"}))
    assert "hunter2" not in dump_config(config=parsed) and parsed.store.password.get_secret_value() == "hunter2"


def test_mirror_serves_the_newest_policy_after_the_server_is_gone() -> None:
    inner = ShmStore(owner=True)
    mirror = MirroredStore(inner=inner)
    try:
        put_all(store=mirror, items={"weights/main/1": Message(arrays={"w": np.ones(2, np.float32)}),
                                     "batch/main/1": Message(arrays={"x": np.zeros(4, np.float32)})})
        inner.put(key="optim/main/1", message=Message(header={"step": 3}))   # written by a learner function
        mirror.remember(keys=["optim/main/1"])
        assert store_descriptor(mirror) == {"backend": "shm", "namespace": "st"}
        for key in ("weights/main/1", "optim/main/1", "batch/main/1"):
            inner.delete(key=key)  # "the server lost everything"
        assert mirror.get(key="optim/main/1").header == {"step": 3}
        assert np.array_equal(mirror.get(key="weights/main/1").arrays["w"], [1, 1])
        with pytest.raises(KeyNotFound):
            mirror.get(key="batch/main/1")  # batches are not mirrored
        mirror.delete(key="weights/main/1")
        with pytest.raises(KeyNotFound):
            mirror.get(key="weights/main/1")
    finally:
        mirror.close()


def test_functions_open_the_store_named_by_the_request() -> None:
    assert isinstance(function_store(header={}), ShmStore)  # no descriptor: this run's shm store
    store = function_store(header={"_store": {"backend": "shm", "namespace": "xy"}})
    assert isinstance(store, ShmStore) and store.namespace == "xy"


def test_stamped_runtime_adds_headers_without_overriding_the_request() -> None:
    seen = []

    class Recorder:
        def invoke(self, *, spec, request):
            seen.append(request.header)

    runtime = StampedRuntime(inner=Recorder(), headers={"_store": {"backend": "shm"}, "x": 1})
    runtime.invoke(spec=None, request=Message(header={"x": 2}))
    assert seen == [{"_store": {"backend": "shm"}, "x": 2}]


def test_store_failures_are_recognised_wherever_they_were_raised() -> None:
    remote = FunctionFailed(function="learner", invocation_id="i", attempts=1, error_type="StoreFull",
                            traceback_text="Traceback...\nnimbus.errors.StoreFull: Redis at redis://h:1/0 is full")
    assert "is full" in str(store_failure(remote))
    assert store_failure(StoreFull("full")) is not None and isinstance(store_failure(StoreFull("x")), StoreUnavailable)
    other = FunctionFailed(function="actor", invocation_id="i", attempts=4, error_type="RuntimeError",
                           traceback_text="")
    assert store_failure(other) is None and store_failure(ValueError("x")) is None
