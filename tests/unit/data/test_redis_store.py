"""RedisStore against a real redis-server on loopback: key scheme, pipelines, and every P11/P12 outcome."""

from __future__ import annotations

import os
import pickle
import re
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from nimbus.config import StoreConfig
from nimbus.data.codec import Message
from nimbus.data.redis_store import RedisSettings, RedisStore
from nimbus.data.store import KeyExists, KeyNotFound, ShmStore
from nimbus.data.stores import PASSWORD_ENV, MirroredStore, driver_store, function_store, store_descriptor
from nimbus.errors import CodecError, StoreAuthError, StoreFull, StoreUnavailable

pytestmark = pytest.mark.redis


def settings(url: str, **kwargs) -> RedisSettings:
    return RedisSettings(url=url, namespace=kwargs.pop("namespace", "t"), backoff_base_s=0.01, backoff_cap_s=0.1,
                         timeout_s=1.0, **kwargs)


def weights(n: int = 3) -> Message:
    return Message(header={"policy_version": 1}, arrays={"w": np.arange(n, dtype=np.float32)})


def test_key_scheme_pipelines_and_purge(redis_server) -> None:
    server = redis_server()
    store = RedisStore(settings=settings(server.url), owner=True)
    other = RedisStore(settings=settings(server.url, namespace="other"), owner=True)
    other.put(key="weights/main/0", message=weights())
    store.put_many(items={f"weights/main/{v}": weights() for v in (1, 2, 10)} | {"weights/main2/99": weights()})
    store.put(key="optim/main/2", message=Message(header={"x": 1}))
    assert store.keys(prefix="weights/main") == ["weights/main/1", "weights/main/10", "weights/main/2"]
    assert store.latest(prefix="weights/main") == "weights/main/10"
    assert np.array_equal(store.get(key="weights/main/2").arrays["w"], [0, 1, 2])
    with pytest.raises(KeyExists):
        store.put(key="weights/main/2", message=weights())
    store.delete(key="weights/main/10")
    assert store.latest(prefix="weights/main") == "weights/main/2"
    with pytest.raises(KeyNotFound):
        store.get(key="weights/main/10")
    store.delete(key="weights/main/10")   # absent now: a no-op (core.Store.delete)
    raw = redis.Redis.from_url(server.url)
    assert raw.get("nimbus:t:v:optim/main/2").startswith(b"NMBF")  # a codec frame under the documented key
    store.close()
    assert sorted(k.decode() for k in raw.keys("*")) == sorted(
        ["nimbus:other:run", "nimbus:other:index", "nimbus:other:v:weights/main/0"])  # only the other run's
    other.close()


def test_unreachable_at_start_names_the_url_or_falls_back(tmp_path: Path) -> None:
    url = "redis://127.0.0.1:1/0"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="127.0.0.1:1"):
        RedisStore(settings=settings(url, max_retries=2), owner=True)
    assert time.monotonic() - started < 5.0
    config = StoreConfig(backend="redis", url=url, fallback="shm", max_retries=1, backoff_base_s=0.01)
    store = driver_store(config=config, namespace="t")
    assert isinstance(store, ShmStore)
    store.close()
    with pytest.raises(StoreUnavailable, match="store.fallback"):
        driver_store(config=StoreConfig(backend="redis", url=url, max_retries=1, backoff_base_s=0.01), namespace="t")


def test_wrong_password_is_a_clear_error_without_the_password(redis_server) -> None:
    server = redis_server(password="right-one")
    for password in ("wrong-one", None):
        started = time.monotonic()
        with pytest.raises(StoreAuthError) as info:
            RedisStore(settings=settings(server.url, password=password), owner=True)
        assert server.url in str(info.value) and "store.password" in str(info.value)
        assert "wrong-one" not in str(info.value)
        assert time.monotonic() - started < 2.0  # refused credentials are not retried
    config = StoreConfig(backend="redis", url=server.url, password="wrong-one", fallback="shm")
    with pytest.raises(StoreAuthError):  # never falls back on a credentials error
        driver_store(config=config, namespace="t")


def test_function_opens_the_store_from_a_descriptor_and_the_password_env(redis_server, monkeypatch) -> None:
    server = redis_server(password="s3cret")
    owner = RedisStore(settings=settings(server.url, password="s3cret"), owner=True)
    owner.put(key="weights/main/0", message=weights())
    descriptor = store_descriptor(owner)
    assert "s3cret" not in repr(descriptor) and "password" not in descriptor
    monkeypatch.setenv(PASSWORD_ENV, "s3cret")
    opened = function_store(header={"_store": descriptor})
    assert opened is function_store(header={"_store": descriptor})  # one connection per worker process
    assert opened.get(key="weights/main/0").header == {"policy_version": 1}
    owner.close()


def test_planted_pickle_is_refused_and_never_executed(redis_server, tmp_path: Path) -> None:
    """P11: a pickle planted under a nimbus key is not a codec frame: rejected, no side effect."""
    server = redis_server()
    store = RedisStore(settings=settings(server.url), owner=True)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    redis.Redis.from_url(server.url).set("nimbus:t:v:weights/main/7", pickle.dumps(Evil()))
    with pytest.raises(CodecError, match="not a nimbus frame"):
        store.get(key="weights/main/7")
    assert not marker.exists()
    store.close()


def test_killed_mid_run_bounded_retries_then_unavailable(redis_server) -> None:
    server = redis_server()
    store = RedisStore(settings=settings(server.url, max_retries=3), owner=True)
    store.put(key="weights/main/0", message=weights())
    server.kill()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="after 3 retries"):
        store.get(key="weights/main/0")
    assert time.monotonic() - started < 5.0
    server.start()  # back, but empty: the run's keys are gone, and the store says so
    with pytest.raises(StoreUnavailable, match="no longer holds run"):
        store.get(key="weights/main/0")
    store.close()


def test_full_redis_applies_back_pressure_then_stops_clearly(redis_server) -> None:
    """maxmemory + noeviction: a write waits for room (a consumer deletes), and stops with StoreFull if none comes."""
    server = redis_server(maxmemory="3mb")
    store = RedisStore(settings=settings(server.url, full_wait_s=1.0), owner=True)
    big = Message(arrays={"x": np.random.default_rng(0).integers(0, 255, 512 * 1024, dtype=np.uint8)})
    written = []
    with pytest.raises(StoreFull, match="maxmemory") as full:
        for i in range(64):
            store.put(key=f"batch/main/{i}", message=big)
            written.append(i)
    assert 0 < len(written) < 64
    message = str(full.value)  # Redis's numbers and what to do, not the raw reply (its Lua script, "OOM ...")
    assert re.search(r"used_memory [\d.]+ MB of maxmemory 3\.1 MB", message) and "a write of 0.52 MB" in message
    assert "CONFIG SET maxmemory" in message and "store.keep_versions" in message and "store.full_wait_s=1.0" in message
    assert "EVAL" not in message and "redis.call" not in message
    freer = threading.Timer(0.3, lambda: store.delete_many(keys=[f"batch/main/{i}" for i in written]))
    freer.start()
    started = time.monotonic()
    store.put(key="batch/main/999", message=big)  # waits for the consumer, then succeeds
    assert 0.2 < time.monotonic() - started < 1.0
    freer.join()
    store.close()


def test_an_acl_user_limited_to_nimbus_keys_is_enough(redis_server) -> None:
    """The ACL of docs/cluster.md: nimbus's keys and commands only; a user without them gets a clear error."""
    server = redis_server()
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser("nimbus", enabled=True, passwords=["+pw"], keys=["nimbus:*"], commands=[
        "+get", "+mget", "+set", "+del", "+exists", "+zadd", "+zrem", "+zrange", "+zrangebylex", "+pexpire",
        "+multi", "+exec", "+eval", "+ping", "+auth", "+config|get"])
    admin.acl_setuser("reader", enabled=True, passwords=["+pw"], keys=["nimbus:*"], commands=["+ping", "+auth"])
    store = RedisStore(settings=settings(server.url, username="nimbus", password="pw"), owner=True)
    store.put_many(items={"weights/main/1": weights(), "optim/main/1": weights()})
    assert store.latest(prefix="weights/main") == "weights/main/1" and store.get(key="optim/main/1").arrays
    store.close()
    assert admin.keys("*") == []
    with pytest.raises(StoreAuthError, match="reader.*no permissions"):
        RedisStore(settings=settings(server.url, username="reader", password="pw"), owner=True)


def test_every_key_is_leased_and_renewed_while_the_owner_lives(redis_server) -> None:
    """Keys written by the owner and by a function carry the lease; the owner's thread keeps them alive
    past several leases; without renewal (a killed driver) they expire; close() deletes at once."""
    server = redis_server()
    raw = redis.Redis.from_url(server.url)
    owner = RedisStore(settings=settings(server.url, lease_s=0.6), owner=True)
    worker = RedisStore(settings=RedisSettings(**{k: v for k, v in owner.descriptor().items() if k != "backend"}))
    owner.put(key="weights/main/0", message=weights())
    worker.put(key="weights/main/1", message=weights())
    keys = ["nimbus:t:run", "nimbus:t:index", "nimbus:t:v:weights/main/0", "nimbus:t:v:weights/main/1"]
    assert all(0 < raw.pttl(k) <= 600 for k in keys)
    time.sleep(2.0)  # > 3 leases: only the renewal keeps them
    assert all(raw.exists(k) for k in keys)
    owner._lease_stop.set()  # what a SIGKILL does to the renewal
    owner._lease_thread.join()
    time.sleep(0.8)
    assert raw.keys("nimbus:t:*") == []
    owner.close()
    worker.close()


def test_a_writer_may_replace_its_own_value_and_no_one_else_may(redis_server) -> None:
    """P1 on Redis: a retried attempt (same invocation id) redoes its put; any other put of the key is refused;
    a delete removes the writer's mark with the value."""
    server = redis_server()
    store = RedisStore(settings=settings(server.url), owner=True)
    store.put_many(items={"weights/main/1": weights(3), "optim/main/1": weights(3)}, writer="inv-a")
    for intruder in (None, "inv-b"):
        with pytest.raises(KeyExists, match="optim/main/1"):
            store.put_many(items={"weights/main/1": weights(4), "optim/main/1": weights(4)}, writer=intruder)
    store.put_many(items={"weights/main/1": weights(5), "optim/main/1": weights(5)}, writer="inv-a")
    assert store.get(key="weights/main/1").arrays["w"].tolist() == [0, 1, 2, 3, 4]
    store.put(key="weights/main/0", message=weights(2))  # no writer: nobody may replace it
    for writer in (None, "inv-a"):
        with pytest.raises(KeyExists):
            store.put(key="weights/main/0", message=weights(6), writer=writer)
    store.delete(key="weights/main/1")
    store.put(key="weights/main/1", message=weights(7))  # free again, for anyone
    raw = redis.Redis.from_url(server.url)
    assert sorted(k.decode() for k in raw.keys("nimbus:t:w:*")) == ["nimbus:t:w:optim/main/1"]
    store.close()
    assert raw.keys("*") == []


class _LoseOneReply:
    """A TCP proxy to Redis that forwards both ways, except that the first request containing ``marker`` is
    applied by the server and its reply never arrives: the proxy waits until ``applied()`` and then drops the
    client's connection — what redis-py meets when a network path dies after EXEC (it then re-sends it)."""

    def __init__(self, *, port: int, marker: bytes, applied) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.port, self.marker, self.applied, self.lost = port, marker, applied, 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            upstream = socket.create_connection(("127.0.0.1", self.port))
            muted = threading.Event()
            threading.Thread(target=self._pump, args=(client, upstream, muted, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, muted, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, muted: threading.Event, requests: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                if requests and not self.lost and self.marker in data:
                    self.lost += 1
                    muted.set()  # no reply from here on reaches the client
                    sink.sendall(data)
                    deadline = time.monotonic() + 5
                    while not self.applied() and time.monotonic() < deadline:
                        time.sleep(0.01)
                    source.shutdown(socket.SHUT_RDWR)
                    return
                if not (muted.is_set() and not requests):
                    sink.sendall(data)
        except OSError:
            pass


def test_a_resent_transaction_after_a_lost_reply_succeeds_for_its_writer(redis_server) -> None:
    """The learner's put is one MULTI/EXEC; if its reply is lost, redis-py re-sends it on a new connection,
    and the second EXEC finds the values the first one wrote: for their writer that is a success."""
    server = redis_server()
    raw = redis.Redis.from_url(server.url)
    proxy = _LoseOneReply(port=server.port, marker=b"EXEC", applied=lambda: raw.exists("nimbus:t:v:optim/main/1"))
    store = RedisStore(settings=settings(proxy.url), owner=True)
    store.put_many(items={"weights/main/1": weights(3), "optim/main/1": weights(3)}, writer="inv-a")
    assert proxy.lost == 1
    assert store.keys(prefix="") == ["optim/main/1", "weights/main/1"]
    store.close()


def test_the_drivers_put_resent_after_a_lost_reply_succeeds_and_others_are_still_refused(redis_server) -> None:
    """The driver's puts (version-0 weights, PBT exploits) go through MirroredStore: a lost EXEC reply and
    redis-py's re-send must not end the run with KeyExists; a key someone else holds is still refused."""
    server = redis_server()
    raw = redis.Redis.from_url(server.url)
    proxy = _LoseOneReply(port=server.port, marker=b"EXEC", applied=lambda: raw.exists("nimbus:t:v:weights/main/0"))
    store = MirroredStore(inner=RedisStore(settings=settings(proxy.url), owner=True))
    store.put(key="weights/main/0", message=weights(3))
    assert proxy.lost == 1
    assert store.inner.get(key="weights/main/0").arrays["w"].tolist() == [0, 1, 2]
    store.inner.put(key="weights/main/1", message=weights(2), writer="inv-a")   # a learner's value
    with pytest.raises(KeyExists, match="weights/main/1"):
        store.put(key="weights/main/1", message=weights(4))
    store.close()



def test_a_value_larger_than_maxmemory_is_refused_with_the_size_to_set(redis_server) -> None:
    """No consumer can ever make room for a value larger than maxmemory: the message says so."""
    server = redis_server(maxmemory="2mb")
    store = RedisStore(settings=settings(server.url, full_wait_s=0.2), owner=True)
    huge = Message(arrays={"x": np.random.default_rng(0).integers(0, 255, 3 * 1024 * 1024, dtype=np.uint8)})
    with pytest.raises(StoreFull, match=r"larger than maxmemory: raise Redis's maxmemory above 3\.1 MB"):
        store.put(key="weights/main/0", message=huge)
    store.close()


def test_a_consumer_frees_room_in_a_redis_already_over_maxmemory(redis_server) -> None:
    """P12: once used memory is over maxmemory (a write can overshoot it), Redis refuses every command queued in
    MULTI, so a transactional delete could never free room; the delete must still go through."""
    server = redis_server(maxmemory="64mb")
    store = RedisStore(settings=settings(server.url, full_wait_s=0.2), owner=True)
    big = Message(arrays={"x": np.random.default_rng(0).integers(0, 255, 512 * 1024, dtype=np.uint8)})
    store.put_many(items={f"batch/main/{i}": big for i in range(6)})
    redis.Redis.from_url(server.url).config_set("maxmemory", "3mb")   # now well over it
    with pytest.raises(StoreFull):
        store.put(key="batch/main/9", message=big)
    store.delete_many(keys=[f"batch/main/{i}" for i in range(6)])
    assert store.keys(prefix="batch/main") == []
    store.put(key="batch/main/9", message=big)   # room again
    store.close()
