"""Opening the run's Store: on the driver from ``config.store``, in a function from a *store descriptor*.

A descriptor is a small JSON-able dict the driver stamps on every request header as ``_store``
(runtime/factory.py ``StampedRuntime``); a function turns it into a Store with ``function_store``
(cached per process, so a warm worker reuses its connection)::

    {"backend": "shm", "namespace": "st"}
    {"backend": "redis", "url": "redis://10.0.0.5:6379/0", "namespace": "<run id>", "username": "nimbus",
     "password_env": "NIMBUS_STORE_PASSWORD", ...}            # never the password itself
    {"backend": "ray", "directory": "nimbus-store-<run id>"}

The Redis password reaches workers through the environment variable named by ``password_env``
(local workers inherit the driver's environment; Ray actors get it in their constructor's env).

``MirroredStore`` (driver side, remote backends) keeps a local copy of the newest weights and
optimizer state, so a final checkpoint can still be written when Redis is gone (P12).

Example::

    env = store_worker_env(config=config.store)                    # driver: workers' environment
    store = driver_store(config=config.store, namespace="run42")   # driver: the owning store
    descriptor = store_descriptor(store)
    function_store(header={"_store": descriptor}).get(key="weights/main/0")   # in a function
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Protocol, runtime_checkable

from nimbus.data.codec import Message
from nimbus.data.store import ShmStore, Store
from nimbus.errors import StoreAuthError, StoreFull, StoreUnavailable

log = logging.getLogger(__name__)
STORE_HEADER = "_store"
PASSWORD_ENV = "NIMBUS_STORE_PASSWORD"
MIRRORED_PREFIXES = ("weights/", "optim/")
DRIVER_WRITER = "driver"   # the writer of the driver's own puts on a remote store (MirroredStore)
_opened: dict[str, Store] = {}  # per process: descriptor JSON -> Store (a warm worker keeps its connection)


@runtime_checkable
class BatchedStore(Protocol):
    """A Store that writes several values in one round trip (redis: one pipelined transaction)."""

    def put_many(self, *, items: dict[str, Message], writer: str | None = None) -> None: ...


def put_all(*, store: Store, items: dict[str, Message], writer: str | None = None) -> None:
    """Write ``items`` in one batch where the backend can, else one by one. ``writer``: see data/store.py
    (a function passes its invocation id, so that a retry of it can redo the puts)."""
    if isinstance(store, BatchedStore):
        store.put_many(items=items, writer=writer)
        return
    for key, message in items.items():
        store.put(key=key, message=message, writer=writer)


def store_descriptor(store: Store) -> dict[str, Any]:
    """The descriptor a function needs to open ``store``."""
    if isinstance(store, ShmStore):
        return {"backend": "shm", "namespace": store.namespace}
    return store.descriptor()


def make_store(*, descriptor: dict[str, Any] | None) -> Store:
    """Open a (non-owning) Store from a descriptor; None means the run's shm store."""
    backend = (descriptor or {}).get("backend", "shm")
    if backend == "shm":
        return ShmStore(namespace=(descriptor or {}).get("namespace", "st"))
    if backend == "redis":
        from nimbus.data.redis_store import RedisSettings, RedisStore

        fields = {k: v for k, v in descriptor.items() if k not in ("backend", "password_env")}
        password = os.environ.get(descriptor.get("password_env") or PASSWORD_ENV)
        return RedisStore(settings=RedisSettings(password=password, **fields), owner=False)
    if backend == "ray":
        from nimbus.data.ray_store import RayStore

        return RayStore.attach(descriptor=descriptor)
    raise ValueError(f"unknown store backend {backend!r} in descriptor {descriptor!r}")


def function_store(*, header: dict[str, Any]) -> Store:
    """The run's Store as a function sees it (from the request's ``_store`` header), opened once per process."""
    descriptor = header.get(STORE_HEADER)
    cache_key = json.dumps(descriptor, sort_keys=True)
    if cache_key not in _opened:
        _opened[cache_key] = make_store(descriptor=descriptor)
    return _opened[cache_key]


def close_function_stores() -> None:
    """Close every Store ``function_store`` opened in this process (an in-process runtime's shutdown: its
    functions ran in the driver, whose process outlives them)."""
    while _opened:
        _, store = _opened.popitem()
        store.close()


def store_password(*, config: Any) -> str | None:
    """The Redis password from ``store.password`` or the variable ``store.password_env`` names."""
    if config.password is not None:
        return config.password.get_secret_value()
    if config.password_env is not None:
        value = os.environ.get(config.password_env)
        if value is None:
            raise StoreAuthError(f"store.password_env names {config.password_env!r}, which is not set")
        return value
    return None


def store_worker_env(*, config: Any) -> dict[str, str]:
    """What workers need in their environment to open the store (the Redis password, if any).

    Also exported into the driver's environment: local workers inherit it; Ray workers get it from
    the runtime's ``worker_env``.
    """
    password = store_password(config=config) if config.backend == "redis" else None
    env = {PASSWORD_ENV: password} if password is not None else {}
    os.environ.update(env)
    return env


def driver_store(*, config: Any, namespace: str) -> Store:
    """The driver's (owning) Store from ``config.store`` (call ``store_worker_env`` first).

    Redis unreachable at start: ``StoreUnavailable`` naming the URL, or with ``store.fallback: shm``
    a warning and the shm store. Refused credentials never fall back.
    """
    if config.backend == "shm":
        return ShmStore(owner=True)
    if config.backend == "ray":
        from nimbus.data.ray_store import RayStore

        return MirroredStore(inner=RayStore.create(namespace=namespace))
    try:
        from nimbus.data.redis_store import RedisSettings, RedisStore, redact_url
    except ImportError as exc:
        raise StoreUnavailable(
            f"store.backend: redis needs the [redis] extra (pip install -e '.[redis]'): {exc}") from None
    settings = RedisSettings(url=config.url, namespace=namespace, username=config.username,
                             password=store_password(config=config), max_retries=config.max_retries,
                             backoff_base_s=config.backoff_base_s, backoff_cap_s=config.backoff_cap_s,
                             timeout_s=config.timeout_s, full_wait_s=config.full_wait_s, lease_s=config.lease_s)
    try:
        return MirroredStore(inner=RedisStore(settings=settings, owner=True))
    except (StoreAuthError, StoreFull):  # the server answered: falling back would hide a configuration problem
        raise
    except StoreUnavailable as exc:
        if config.fallback != "shm":
            raise StoreUnavailable(f"{exc} (set store.fallback: shm to run on this machine without it)") from None
        log.warning("Redis at %s is unreachable (%s); store.fallback: shm — using shared memory on this machine",
                    redact_url(config.url), exc)
        return ShmStore(owner=True)


class MirroredStore:
    """Driver-side wrapper of a remote Store: what the driver puts or ``remember``s under weights/ and
    optim/ is also kept here, so checkpoints and evaluation read locally and survive the server.

    The driver's puts carry the writer ``DRIVER_WRITER``: when a reply is lost on the network and the
    client re-sends the put (redis-py re-sends a MULTI/EXEC), the second put finds the driver's own value
    and succeeds instead of ending the run with KeyExists. A key another writer holds is still refused.
    On the shm store (no network, no re-send) the driver's puts stay write-once."""

    def __init__(self, *, inner: Store, writer: str = DRIVER_WRITER) -> None:
        self.inner = inner
        self.backend = getattr(inner, "backend", "remote")
        self.writer = writer
        self._local: dict[str, Message] = {}

    def put(self, *, key: str, message: Message, writer: str | None = None) -> None:
        self.inner.put(key=key, message=message, writer=writer or self.writer)
        self._keep(key, message)

    def put_many(self, *, items: dict[str, Message], writer: str | None = None) -> None:
        put_all(store=self.inner, items=items, writer=writer or self.writer)
        for key, message in items.items():
            self._keep(key, message)

    def get(self, *, key: str) -> Message:
        return self._local[key] if key in self._local else self.inner.get(key=key)

    def remember(self, *, keys: list[str]) -> None:
        """Copy ``keys`` from the server into the local mirror (e.g. the learner's newest weights)."""
        missing = [k for k in keys if k not in self._local]
        for key in missing:
            self._keep(key, self.inner.get(key=key), copy=True)

    def latest(self, *, prefix: str) -> str | None:
        return self.inner.latest(prefix=prefix)

    def keys(self, *, prefix: str) -> list[str]:
        return self.inner.keys(prefix=prefix)

    def delete(self, *, key: str) -> None:
        self._local.pop(key, None)
        self.inner.delete(key=key)

    def close(self) -> None:
        self._local.clear()
        self.inner.close()

    def descriptor(self) -> dict[str, Any]:
        return store_descriptor(self.inner)

    def _keep(self, key: str, message: Message, *, copy: bool = False) -> None:
        if key.startswith(MIRRORED_PREFIXES):
            arrays = {k: v.copy() for k, v in message.arrays.items()} if copy else message.arrays
            self._local[key] = Message(header=dict(message.header), arrays=arrays)
