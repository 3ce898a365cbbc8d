"""ShmStore: immutable keyed values in shared memory, readable by key from any process of the run."""

from __future__ import annotations

import _posixshmem
import json
import os

import numpy as np
import pytest

from nimbus.data.codec import Message
from nimbus.data.shm import Segment, list_segments
from nimbus.data.store import MAX_KEY_CHARS, KeyExists, KeyNotFound, ShmStore, Store, key_version
from support import run_python


@pytest.fixture
def store():
    """Not tests/unit/conftest.py's ``store`` (a random namespace): the default one, which the children these
    tests start open with a plain ``ShmStore()``."""
    with ShmStore(owner=True) as s:
        yield s


def weights(version: int) -> Message:
    return Message(header={"policy_version": version},
                   arrays={"w": np.full((3, 2), version, np.float32), "b": np.arange(4, dtype=np.int64)})


def test_shm_store_is_a_store(store: ShmStore) -> None:
    assert isinstance(store, ShmStore)
    _: Store = store  # structural: type checkers accept it


def test_put_get_round_trip_with_read_only_zero_copy_arrays(store: ShmStore) -> None:
    store.put(key="weights/main/3", message=weights(3))
    got = store.get(key="weights/main/3")
    assert got.header == {"policy_version": 3}
    np.testing.assert_array_equal(got.arrays["w"], np.full((3, 2), 3, np.float32))
    for array in got.arrays.values():
        assert not array.flags.writeable and not array.flags.owndata
    with pytest.raises(ValueError):
        got.arrays["w"][0, 0] = 1.0


def test_empty_zero_size_and_bool_values(store: ShmStore) -> None:
    store.put(key="misc/empty", message=Message(header={"a": 1}))
    store.put(key="misc/odd", message=Message(arrays={"z": np.zeros((0, 4)), "m": np.array([True, False])}))
    assert store.get(key="misc/empty") == Message(header={"a": 1})
    odd = store.get(key="misc/odd").arrays
    assert odd["z"].shape == (0, 4) and odd["m"].tolist() == [True, False]


def test_values_are_immutable(store: ShmStore) -> None:
    store.put(key="weights/main/0", message=weights(0))
    with pytest.raises(KeyExists, match="weights/main/0"):
        store.put(key="weights/main/0", message=weights(1))
    assert store.get(key="weights/main/0").header["policy_version"] == 0


def test_missing_key_raises_key_not_found_naming_it(store: ShmStore) -> None:
    with pytest.raises(KeyNotFound, match="weights/main/9") as info:
        store.get(key="weights/main/9")
    assert isinstance(info.value, KeyError) and info.value.key == "weights/main/9"


@pytest.mark.parametrize("key", ["", "/a", "a/", "a//b", "a b", "a~b", "é", "x" * (MAX_KEY_CHARS + 1)])
def test_invalid_keys_raise_value_error_naming_the_key(store: ShmStore, key: str) -> None:
    with pytest.raises(ValueError, match="invalid store key") as info:
        store.put(key=key, message=weights(0))
    assert repr(key)[:40] in str(info.value)


def test_longest_key_is_accepted(store: ShmStore) -> None:
    key = "k/" + "x" * (MAX_KEY_CHARS - 2)
    store.put(key=key, message=weights(0))
    assert store.keys(prefix="k") == [key]


def test_segment_names_are_readable_and_under_the_run_prefix(store: ShmStore, prefix: str) -> None:
    store.put(key="weights/main/12", message=weights(12))
    assert list_segments(prefix=prefix) == [f"{prefix}st_weights~main~12"]


def test_latest_and_keys_are_path_wise(store: ShmStore) -> None:
    for key in ["weights/main/1", "weights/main/2", "weights/main/10", "weights/main2/99", "weights/main/best"]:
        store.put(key=key, message=weights(0))
    assert store.latest(prefix="weights/main") == "weights/main/10"
    assert store.latest(prefix="weights/main/") == "weights/main/10"
    assert store.latest(prefix="weights") == "weights/main2/99"
    assert store.latest(prefix="nothing") is None
    assert store.keys(prefix="weights/main") == [
        "weights/main/1", "weights/main/10", "weights/main/2", "weights/main/best"]
    assert len(store.keys(prefix="")) == 5
    assert key_version("weights/main/10") == 10 and key_version("weights/main/best") is None


def test_uncommitted_value_is_absent_and_replaced_by_a_put(store: ShmStore) -> None:
    store.put(key="weights/main/1", message=weights(1))
    crashed = Segment.create(name=store.segment_of(key="weights/main/2"), size_bytes=4096)  # commit word 0
    crashed.close()
    with pytest.raises(KeyNotFound):
        store.get(key="weights/main/2")
    assert store.keys(prefix="weights/main") == ["weights/main/1"]
    assert store.latest(prefix="weights/main") == "weights/main/1"
    store.put(key="weights/main/2", message=weights(2))  # the retry of the crashed writer succeeds
    assert store.get(key="weights/main/2").header["policy_version"] == 2


def test_value_not_yet_sized_is_absent(store: ShmStore) -> None:
    fd = _posixshmem.shm_open("/" + store.segment_of(key="weights/main/5"), os.O_CREAT | os.O_RDWR, mode=0o600)
    os.close(fd)  # created but not yet truncated: size 0
    assert store.latest(prefix="weights/main") is None
    with pytest.raises(KeyNotFound):
        store.get(key="weights/main/5")


def test_views_stay_valid_after_delete(store: ShmStore, prefix: str) -> None:
    store.put(key="weights/main/1", message=weights(1))
    w = store.get(key="weights/main/1").arrays["w"]
    store.delete(key="weights/main/1")
    assert list_segments(prefix=prefix) == []
    assert float(w.sum()) == 6.0
    with pytest.raises(KeyNotFound):
        store.get(key="weights/main/1")
    store.delete(key="weights/main/1")  # absent: no-op


def test_owner_close_unlinks_everything_of_its_namespace_only(prefix: str) -> None:
    other = ShmStore(namespace="x", owner=True)
    other.put(key="a/1", message=weights(1))
    store = ShmStore(owner=True)
    for version in range(3):
        store.put(key=f"weights/main/{version}", message=weights(version))
    ShmStore().close()  # a worker's store: leaves values in place
    assert len(list_segments(prefix=prefix)) == 4
    store.close()
    assert list_segments(prefix=prefix) == [f"{prefix}x_a~1"]
    other.close()
    assert list_segments(prefix=prefix) == []


def test_get_and_put_across_processes(store: ShmStore, prefix: str) -> None:
    store.put(key="weights/main/7", message=weights(7))
    code = ("import json\nfrom nimbus.data.codec import Message\nimport numpy as np\n"
            "from nimbus.data.store import ShmStore\n"
            "s = ShmStore()\nm = s.get(key=s.latest(prefix='weights/main'))\n"
            "s.put(key='grads/l0/7', message=Message(header={'from': 'worker'}, arrays={'g': m.arrays['w'] * 2}))\n"
            "s.close()\n"
            "print(json.dumps({'v': m.header['policy_version'], 'w': m.arrays['w'].tolist()}))")
    out = json.loads(run_python(code, prefix))
    assert out == {"v": 7, "w": np.full((3, 2), 7.0).tolist()}
    grads = store.get(key="grads/l0/7")  # put by a worker that has exited since
    assert grads.header == {"from": "worker"} and float(grads.arrays["g"].sum()) == 84.0


def test_a_writer_may_replace_its_own_value_and_no_one_else_may(store: ShmStore, prefix: str) -> None:
    """P1: a retried attempt (same invocation id) redoes its put; any other put of the key is refused."""
    code = ("from nimbus.data.store import ShmStore\nfrom nimbus.data.codec import Message\nimport numpy as np\n"
            "ShmStore().put(key='weights/main/1', message=Message(header={'attempt': 1}, "
            "arrays={'w': np.zeros(3, np.float32)}), writer='inv-a')\n")
    run_python(code, prefix)  # attempt 1 wrote, then its process went away
    for intruder in (None, "inv-b"):
        with pytest.raises(KeyExists):
            store.put(key="weights/main/1", message=weights(9), writer=intruder)
    store.put(key="weights/main/1", message=Message(header={"attempt": 2}, arrays={"w": np.ones(5, np.float32)}),
              writer="inv-a")
    got = store.get(key="weights/main/1")
    assert got.header == {"attempt": 2} and got.arrays["w"].tolist() == [1.0] * 5
    assert list_segments(prefix=prefix) == [store.segment_of(key="weights/main/1")]
    store.put(key="weights/main/2", message=weights(2))  # no writer: nobody may replace it, not even "no one"
    for writer in (None, "inv-a"):
        with pytest.raises(KeyExists):
            store.put(key="weights/main/2", message=weights(3), writer=writer)
    assert store.get(key="weights/main/2").header == {"policy_version": 2}
    with pytest.raises(ValueError, match="writer"):
        store.put(key="weights/main/3", message=weights(3), writer="")
