"""RayStore: the ``ray`` Store backend — values in Ray's object store, addressed by Store key.

The object store has no key space of its own, so a small *directory* actor (one per run, named
``nimbus-store-<namespace>``, zero CPUs, placed on the driver's node, fate-shared with the driver)
maps each Store key to the ObjectRef of its value. A writer passes the frame to the directory, which
``ray.put``s it itself and so *owns* it: a value outlives the function that wrote it (a learner
reclaimed by keep-alive does not take the weights with it; Ray ≥ 2.56 has no ``ray.put(_owner=...)``,
so this costs one extra copy and, across nodes, one hop via the driver's node). Deleting the key drops
the directory's reference and Ray frees the object once no reader holds it.

Values are codec frames wrapped in a uint8 array: Ray ships and stores those bytes (its own
serialisation of a plain byte array), and a reader gets a read-only view of the frame out of shared
memory (frames under ~100 KiB Ray inlines and copies) and decodes it with the codec. Nothing nimbus reads is
unpickled by nimbus.

Only processes connected to the same Ray cluster can use it (the driver and functions of the ``ray``
runtime). If the directory dies (its node failed) every value is gone: ``StoreUnavailable``.

Example::

    store = RayStore.create(namespace="run42")            # driver (owner)
    store.put(key="weights/main/0", message=Message(arrays={"w": np.ones(3, np.float32)}))
    RayStore.attach(descriptor=store.descriptor()).get(key="weights/main/0")     # any Ray worker
    store.close()                                          # kills the directory: every value is freed
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import ray

from nimbus.data.codec import Message, decode, encode
from nimbus.data.store import KeyExists, KeyNotFound, key_version, under_prefix, validate_key
from nimbus.errors import StoreUnavailable

log = logging.getLogger(__name__)


class StoreDirectory:
    """The directory actor: Store key -> ObjectRef (returned boxed in a list so Ray passes the ref, not the value)."""

    def __init__(self) -> None:
        self._refs: dict[str, Any] = {}  # key -> ObjectRef owned by this actor
        self._writers: dict[str, str] = {}  # key -> its writer, for keys put with one (data/store.py)

    def put(self, key: str, frame: Any, writer: str | None = None) -> bool:
        """Own a copy of ``frame`` (Ray resolved the argument): the value outlives its writer. False if
        ``key`` is taken, unless by the same ``writer`` (a retried attempt): then the value is replaced."""
        if key in self._refs and (writer is None or self._writers.get(key) != writer):
            return False
        self._refs[key] = ray.put(frame)
        if writer is not None:
            self._writers[key] = writer
        return True

    def get(self, key: str) -> list | None:
        ref = self._refs.get(key)
        return None if ref is None else [ref]

    def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self._refs if under_prefix(k, prefix))

    def delete(self, keys: list[str]) -> int:
        for key in keys:
            self._writers.pop(key, None)
        return sum(self._refs.pop(key, None) is not None for key in keys)


def directory_name(namespace: str) -> str:
    return f"nimbus-store-{namespace}"


class RayStore:
    """The ``ray`` Store backend (see the module docstring)."""

    backend = "ray"

    def __init__(self, *, directory: Any, name: str, owner: bool, compress_min_bytes: int | None) -> None:
        self._directory = directory
        self._name = name
        self.owner = owner
        self._compress_min_bytes = compress_min_bytes
        self._closed = False

    @classmethod
    def create(cls, *, namespace: str, compress_min_bytes: int | None = 1 << 20) -> RayStore:
        """The driver's store: starts the directory actor on this node."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        name = directory_name(namespace)
        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
        directory = ray.remote(StoreDirectory).options(name=name, num_cpus=0, max_restarts=0,
                                                       scheduling_strategy=here).remote()
        ray.get(directory.keys.remote(""))  # ready (and named) before any function looks it up
        return cls(directory=directory, name=name, owner=True, compress_min_bytes=compress_min_bytes)

    @classmethod
    def attach(cls, *, descriptor: dict[str, Any]) -> RayStore:
        """A function's view of the driver's store (by the directory actor's name)."""
        name = descriptor["directory"]
        try:
            directory = ray.get_actor(name)
        except ValueError as exc:
            raise StoreUnavailable(f"the ray store directory {name!r} is gone: {exc}") from None
        return cls(directory=directory, name=name, owner=False,
                   compress_min_bytes=descriptor.get("compress_min_bytes"))

    def descriptor(self) -> dict[str, Any]:
        return {"backend": "ray", "directory": self._name, "compress_min_bytes": self._compress_min_bytes}

    def put(self, *, key: str, message: Message, writer: str | None = None) -> None:
        """Raises KeyExists if ``key`` is taken, unless by the same ``writer`` (data/store.py)."""
        frame = np.frombuffer(encode(message, compress_min_bytes=self._compress_min_bytes), dtype=np.uint8)
        if not self._ask(self._directory.put.remote(validate_key(key), frame, writer)):
            raise KeyExists(f"store key {key!r} already holds a value; values are immutable")

    def put_many(self, *, items: dict[str, Message], writer: str | None = None) -> None:
        for key, message in items.items():
            self.put(key=key, message=message, writer=writer)

    def get(self, *, key: str) -> Message:
        boxed = self._ask(self._directory.get.remote(validate_key(key)))
        if boxed is None:
            raise KeyNotFound(key)
        frame = self._ask(boxed[0])
        return decode(memoryview(frame))

    def latest(self, *, prefix: str) -> str | None:
        parent = prefix.rstrip("/")
        versioned = [(v, k) for k in self.keys(prefix=prefix)
                     if k.rsplit("/", 1)[0] == parent and (v := key_version(k)) is not None]
        return max(versioned)[1] if versioned else None

    def keys(self, *, prefix: str) -> list[str]:
        return self._ask(self._directory.keys.remote(prefix))

    def delete(self, *, key: str) -> None:
        self._ask(self._directory.delete.remote([key]))

    def delete_many(self, *, keys: list[str]) -> None:
        self._ask(self._directory.delete.remote(list(keys)))

    def close(self) -> None:
        """Owner: kill the directory (every value it owns is freed). Otherwise nothing to release."""
        if self._closed:
            return
        self._closed = True
        if self.owner and ray.is_initialized():
            ray.kill(self._directory, no_restart=True)

    def _ask(self, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as exc:
            raise StoreUnavailable(f"the ray store {self._name!r} lost its directory or a value: {exc}") from None
