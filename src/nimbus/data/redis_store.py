"""RedisStore: the ``redis`` Store backend — the seeds' Distributed Cache (Stellaris VII, Nitro 7) on a
real Redis server, through redis-py. Values are codec frames (safetensors + LZ4), never pickles.

Key scheme (one Redis database may hold several runs; MARLess 5 keeps weights and trajectories under
run-scoped keys, Nitro keys trajectories by invocation id)::

    nimbus:<namespace>:run          a sentinel (JSON: creator pid, time) — "this run's keys exist"
    nimbus:<namespace>:index        sorted set of the run's store keys (all score 0), so ``keys`` and
                                    ``latest`` are ZRANGEBYLEX range queries, never KEYS/SCAN
    nimbus:<namespace>:v:<key>      one value: a codec frame, written once (values are immutable) ...
    nimbus:<namespace>:w:<key>      ... except by the writer named here (a function's invocation id), whose
                                    retried attempt may replace it (data/store.py); both by one script

Every key is leased: written with a TTL of ``lease_s`` that the driver's lease thread renews every
``lease_s / 3``, so the keys of a driver that was SIGKILLed (no ``close()`` ran) are gone from Redis
within ``lease_s``. ``close()`` deletes them at once.

``<key>`` is a Store key such as ``weights/main/12``, ``optim/main/12`` or ``batch/main/12`` (the
round's learner batch). The driver deletes per-round keys once consumed (a batch when its learner
result is accepted, weights and optimizer state ``store.keep_versions`` versions later), so the key
space stays bounded — Nitro's code re-reads an ever-growing hash on every poll; nimbus does not.

Failure behaviour (P11, P12, docs/reliability.md):

* connection errors and timeouts are retried by redis-py (``max_retries``, exponential back-off with
  jitter between ``backoff_base_s`` and ``backoff_cap_s``), then raise ``StoreUnavailable`` naming
  the URL (its password redacted);
* refused credentials raise ``StoreAuthError`` at once (no retry);
* ``OOM command not allowed`` (``maxmemory`` with ``noeviction``) is back-pressure: the write waits
  with back-off up to ``full_wait_s`` for consumers to delete keys, then raises ``StoreFull``, whose
  message gives Redis's used memory and ``maxmemory``, the size of the refused write, and what to change
  (Redis's ``maxmemory``, ``store.keep_versions``, ``store.full_wait_s``), not the raw Redis reply;
* a missing value whose run sentinel is gone too means Redis restarted empty or was flushed:
  ``StoreUnavailable``, not a silent ``KeyNotFound``;
* a value that is not a codec frame (e.g. a pickle planted by someone else) raises ``CodecError``;
  its bytes are never interpreted.

Example::

    store = RedisStore(settings=RedisSettings(url="redis://127.0.0.1:6379/0", namespace="run42"), owner=True)
    store.put(key="weights/main/0", message=Message(arrays={"w": np.ones(3, np.float32)}))
    store.get(key="weights/main/0").arrays["w"]
    store.close()          # owner: deletes every key of the namespace
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from nimbus.data.codec import Message, decode, encode
from nimbus.data.store import KeyExists, KeyNotFound, key_version, under_prefix, validate_key, writer_tag
from nimbus.errors import CodecError, StoreAuthError, StoreFull, StoreUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
_DELETE_CHUNK = 512
# KEYS: value key, writer key; ARGV: frame, writer ("" = none). 1 = written, 0 = taken by another writer.
# Atomic, and idempotent for a writer: a MULTI/EXEC that redis-py re-sends after a lost reply succeeds again.
_PUT_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 1 and (ARGV[2] == '' or redis.call('GET', KEYS[2]) ~= ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2]) end
return 1
"""


def _out_of_memory(exc: Exception) -> bool:
    """Redis refused a write for lack of memory (``maxmemory`` reached under ``noeviction``)."""
    return isinstance(exc, redis.exceptions.OutOfMemoryError) or "OOM" in str(exc) or "maxmemory" in str(exc)


class _Retry(Retry):
    """redis-py's Retry, except that refused credentials (an AuthenticationError is a ConnectionError to
    redis-py) fail at once: waiting does not fix a wrong password."""

    def call_with_retry(self, do: Callable[[], T], fail: Callable[..., Any], is_retryable: Any = None,
                        with_failure_count: bool = False) -> T:
        def retryable(error: Exception) -> bool:
            if isinstance(error, redis.AuthenticationError):
                return False
            return is_retryable(error) if is_retryable else True

        return super().call_with_retry(do, fail, is_retryable=retryable, with_failure_count=with_failure_count)


@dataclass(frozen=True)
class RedisSettings:
    """How to reach Redis and how hard to try. ``password`` is never logged or put in a descriptor."""

    url: str = "redis://127.0.0.1:6379/0"
    namespace: str = "default"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    max_retries: int = 3
    backoff_base_s: float = 0.05
    backoff_cap_s: float = 1.0
    timeout_s: float = 5.0
    full_wait_s: float = 10.0
    compress_min_bytes: int | None = 1 << 20
    lease_s: float = 60.0  # every key of the run expires this long after the driver last renewed it


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (safe for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def strip_credentials(url: str) -> str:
    """``url`` without user and password (they travel separately: ``username``, a password env var)."""
    parts = urlsplit(url)
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class RedisStore:
    """The ``redis`` Store backend (see the module docstring for the key scheme and failure rules)."""

    backend = "redis"

    def __init__(self, *, settings: RedisSettings, owner: bool = False) -> None:
        self.settings = settings
        self.owner = owner
        self._where = redact_url(settings.url)
        self._prefix = f"nimbus:{settings.namespace}:"
        self._index = self._prefix + "index"
        self._sentinel = self._prefix + "run"
        self._closed = False
        self._lease_stop = threading.Event()
        self._lease_thread: threading.Thread | None = None
        retry = _Retry(ExponentialWithJitterBackoff(cap=settings.backoff_cap_s, base=settings.backoff_base_s),
                      settings.max_retries)
        self._redis = redis.Redis.from_url(
            settings.url, username=settings.username, password=settings.password, retry=retry,
            retry_on_error=[redis.ConnectionError, redis.TimeoutError], socket_timeout=settings.timeout_s,
            socket_connect_timeout=settings.timeout_s, health_check_interval=30)
        self._call(self._redis.ping)
        if owner:
            info = json.dumps({"pid": os.getpid(), "created_at": time.time()})
            self._write(lambda: self._redis.set(self._sentinel, info, px=self._lease_ms))
            self._warn_if_evicting()
            self._start_lease()

    # ---- Store protocol -----------------------------------------------------------------------------

    def put(self, *, key: str, message: Message, writer: str | None = None) -> None:
        """Write one value (put script + index, one transaction). Raises KeyExists if the key is taken,
        unless by the same ``writer`` (data/store.py): then the value is replaced."""
        self.put_many(items={key: message}, writer=writer)

    def put_many(self, *, items: dict[str, Message], writer: str | None = None) -> None:
        """Write several values in one pipelined transaction (one round trip). KeyExists names any taken key."""
        frames = {validate_key(k): encode(m, compress_min_bytes=self.settings.compress_min_bytes)
                  for k, m in items.items()}
        tag = writer_tag(writer).hex() if writer is not None else ""

        def write() -> list[Any]:
            pipe = self._redis.pipeline(transaction=True)
            for key, frame in frames.items():
                pipe.eval(_PUT_SCRIPT, 2, self._value_key(key), self._writer_key(key), frame, tag)
            pipe.zadd(self._index, {key: 0 for key in frames})
            self._lease(pipe=pipe, keys=list(frames))
            return pipe.execute()

        results = self._write(write, nbytes=sum(len(frame) for frame in frames.values()))
        taken = [key for key, ok in zip(frames, results) if not ok]
        if taken:
            raise KeyExists(f"store keys {taken} already hold values; values are immutable")

    def get(self, *, key: str) -> Message:
        """The value under ``key`` (arrays are read-only views over the received bytes)."""
        raw = self._call(lambda: self._redis.get(self._value_key(validate_key(key))))
        if raw is None:
            self._check_run_alive()
            raise KeyNotFound(key)
        return self._decode(key=key, raw=raw)

    def latest(self, *, prefix: str) -> str | None:
        """The key directly under ``prefix`` with the highest integer last component, or None."""
        parent = prefix.rstrip("/")
        children = [k for k in self.keys(prefix=prefix) if k.rsplit("/", 1)[0] == parent]
        versioned = [(v, k) for k in children if (v := key_version(k)) is not None]
        return max(versioned)[1] if versioned else None

    def keys(self, *, prefix: str) -> list[str]:
        """Keys under ``prefix`` (path-wise; ``""`` lists all), sorted — a ZRANGEBYLEX range query."""
        head = prefix.rstrip("/")
        low, high = ("-", "+") if not head else (f"[{head}/", f"[{head}/\xff")
        found = self._call(lambda: self._redis.zrangebylex(self._index, low, high))
        return sorted(k for k in (item.decode() for item in found) if under_prefix(k, prefix))

    def delete(self, *, key: str) -> None:
        """Remove ``key`` and its index entry (one transaction); deleting an absent key is a no-op."""
        self.delete_many(keys=[key])

    def delete_many(self, *, keys: list[str]) -> None:
        """Index entries first, then the values, in one round trip but not in MULTI: a full Redis refuses every
        command queued inside MULTI (so a transactional delete could never free room, P12), while DEL and ZREM
        alone are allowed. Readers find keys through the index, so none sees an entry whose value is gone that
        it could not also see with a transaction (a key read just before its delete)."""
        def remove() -> list[Any]:
            pipe = self._redis.pipeline(transaction=False)
            pipe.zrem(self._index, *keys)
            pipe.delete(*[self._value_key(validate_key(k)) for k in keys], *[self._writer_key(k) for k in keys])
            return pipe.execute()

        if keys:
            self._call(remove)

    def close(self) -> None:
        """Owner: delete every key of the namespace (best effort: a dead Redis is logged, not raised)."""
        if self._closed:
            return
        self._closed = True
        self._lease_stop.set()
        if self._lease_thread is not None:
            self._lease_thread.join(timeout=self.settings.timeout_s * (self.settings.max_retries + 1))
        try:
            if self.owner:
                self._purge()
        except (StoreUnavailable, redis.RedisError) as exc:
            log.warning("could not remove this run's keys from Redis at %s: %s", self._where, exc)
        finally:
            self._redis.close()

    def descriptor(self) -> dict[str, Any]:
        """JSON-able description for ``make_store`` in a function (credentials are not in it)."""
        s = self.settings
        return {"backend": "redis", "url": strip_credentials(s.url), "namespace": s.namespace,
                "username": s.username, "max_retries": s.max_retries, "backoff_base_s": s.backoff_base_s,
                "backoff_cap_s": s.backoff_cap_s, "timeout_s": s.timeout_s, "full_wait_s": s.full_wait_s,
                "compress_min_bytes": s.compress_min_bytes, "lease_s": s.lease_s}

    # ---- the lease: a SIGKILLed driver's keys expire ---------------------------------------------------

    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.settings.lease_s * 1000))

    def _lease(self, *, pipe: Any, keys: list[str]) -> None:
        """Queue PEXPIRE for ``keys``' values, their writer marks and the index on ``pipe``: whoever writes a
        key leases it, so a value written after the driver died still expires (PEXPIRE of a missing mark is a
        no-op)."""
        for key in keys:
            pipe.pexpire(self._value_key(key), self._lease_ms)
            pipe.pexpire(self._writer_key(key), self._lease_ms)
        pipe.pexpire(self._index, self._lease_ms)

    def renew_lease(self) -> None:
        """Owner: push every key of the run ``lease_s`` into the future (the sentinel, the index, each value)."""
        keys = [item.decode() for item in self._call(lambda: self._redis.zrange(self._index, 0, -1))]
        pipe = self._redis.pipeline(transaction=False)
        pipe.pexpire(self._sentinel, self._lease_ms)
        self._lease(pipe=pipe, keys=keys)
        self._call(pipe.execute)

    def _start_lease(self) -> None:
        """A daemon thread renews the lease every third of ``lease_s`` until ``close()``; if the driver is
        SIGKILLed, nothing renews it and Redis drops the run's keys within ``lease_s``."""
        def renew_until_closed() -> None:
            while not self._lease_stop.wait(self.settings.lease_s / 3):
                try:
                    self.renew_lease()
                except (StoreUnavailable, StoreAuthError, redis.RedisError) as exc:
                    log.warning("could not renew this run's lease on Redis at %s: %s", self._where, exc)

        self._lease_thread = threading.Thread(target=renew_until_closed, name="redis-lease", daemon=True)
        self._lease_thread.start()

    # ---- internals ----------------------------------------------------------------------------------

    def _value_key(self, key: str) -> str:
        return f"{self._prefix}v:{key}"

    def _writer_key(self, key: str) -> str:
        return f"{self._prefix}w:{key}"

    def _decode(self, *, key: str, raw: bytes) -> Message:
        try:
            return decode(raw)
        except CodecError as exc:
            raise CodecError(f"value of {key!r} in Redis at {self._where} is not a nimbus frame; "
                             f"refusing it without interpreting it ({exc})") from None

    def _purge(self) -> None:
        keys = [item.decode() for item in self._call(lambda: self._redis.zrange(self._index, 0, -1))]
        for start in range(0, len(keys), _DELETE_CHUNK):
            self.delete_many(keys=keys[start:start + _DELETE_CHUNK])
        self._call(lambda: self._redis.delete(self._index, self._sentinel))

    def _check_run_alive(self) -> None:
        if not self._call(lambda: self._redis.exists(self._sentinel)):
            raise StoreUnavailable(f"Redis at {self._where} no longer holds run {self.settings.namespace!r} "
                                   "(restarted empty, flushed, or keys evicted?)")

    def _warn_if_evicting(self) -> None:
        try:
            policy = self._redis.config_get("maxmemory-policy").get("maxmemory-policy", "noeviction")
        except redis.RedisError:  # CONFIG may be forbidden by the ACL: fine
            return
        if policy != "noeviction":
            log.warning("Redis at %s evicts keys (maxmemory-policy=%s): nimbus values may vanish; "
                        "use noeviction so a full Redis applies back-pressure instead", self._where, policy)

    def _write(self, write: Callable[[], T], *, nbytes: int = 0) -> T:
        """Run a write of ``nbytes`` of values, waiting with back-off while Redis is out of memory
        (back-pressure), up to full_wait_s; then StoreFull."""
        deadline = time.monotonic() + self.settings.full_wait_s
        delay = self.settings.backoff_base_s
        while True:
            try:
                return self._call(write)
            except redis.exceptions.ResponseError as exc:  # OutOfMemoryError, EXECABORT after an OOM
                if not _out_of_memory(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreFull(self._full_message(nbytes=nbytes)) from None
                time.sleep(min(delay * (1 + random.random()), max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, self.settings.backoff_cap_s)

    def _full_message(self, *, nbytes: int) -> str:
        """Why a write was refused after the back-pressure wait, with Redis's numbers and what to change."""
        try:
            memory = self._redis.info("memory")
            used, limit = int(memory["used_memory"]), int(memory["maxmemory"])
            numbers = f"used_memory {used / 1e6:.1f} MB of maxmemory {limit / 1e6:.1f} MB"
        except (redis.RedisError, KeyError, ValueError):  # INFO may be forbidden by the ACL
            limit, numbers = 0, "maxmemory reached"
        advice = ("raise Redis's maxmemory (CONFIG SET maxmemory <bytes>, or maxmemory in redis.conf) or "
                  "keep fewer versions in it (store.keep_versions), or wait longer for consumers (store.full_wait_s)")
        if 0 < limit < nbytes:
            advice = f"this one write is larger than maxmemory: raise Redis's maxmemory above {nbytes / 1e6:.1f} MB"
        return (f"Redis at {self._where} is full ({numbers}, policy noeviction): a write of {nbytes / 1e6:.2f} MB "
                f"was refused and no consumer freed room within store.full_wait_s={self.settings.full_wait_s}s; "
                f"{advice}")

    def _call(self, op: Callable[[], T]) -> T:
        """Run one redis-py call (which retries connection errors itself); map failures to nimbus errors."""
        try:
            return op()
        except (redis.AuthenticationError, redis.exceptions.NoPermissionError,
                redis.exceptions.AuthorizationError) as exc:
            user = self.settings.username or "default"
            hint = ("it requires a password: set store.password or store.password_env"
                    if self.settings.password is None else
                    "check store.username and store.password (or store.password_env) and the user's ACL rights")
            raise StoreAuthError(f"Redis at {self._where} refused user {user!r} ({exc}); {hint}") from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise StoreUnavailable(f"cannot reach Redis at {self._where} after {self.settings.max_retries} "
                                   f"retries with back-off: {exc}") from None
        except redis.ResponseError as exc:
            if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
                raise StoreAuthError(f"Redis at {self._where} requires a password: {exc}. Set store.password "
                                     "or store.password_env") from None
            raise
