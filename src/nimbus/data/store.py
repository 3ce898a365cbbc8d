"""Store: versioned, immutable keyed objects (weights, gradients, checkpoints).

A value is a codec ``Message`` (a JSON header plus named arrays). Keys are paths such as
``weights/main/12``; the last component of a versioned key is its integer version, so
``latest(prefix="weights/main")`` finds the newest policy. Values are written once and never
changed: weights are put once per ``policy_version`` and every actor reads them *by key*
(broadcast by id, not one copy per actor).

One exception makes function retries possible (P1, docs/reliability.md): a put may name its ``writer`` (a
function passes its invocation id, which every attempt of one invocation shares). A put that finds a
value written by the *same* writer replaces it: a retried attempt redoes what an attempt that died
after its put had written. Any other put of a taken key (another writer, or none) raises KeyExists.
Nothing reads a function's output before the driver accepts its result, so a replaced value was
never seen by anyone but the attempt that wrote it.

``ShmStore`` keeps each value in its own named POSIX shared-memory segment whose name is derived
from the key, so any process of the run (the driver and its workers share ``NIMBUS_SHM_PREFIX``)
can ``get`` a key by name without asking anyone. Segment layout::

    committed_len u64 | writer tag 24 B (BLAKE2b of the writer; zeros: none) | frame (codec, uncompressed)

``committed_len`` is written last; a reader that finds it different from the segment's frame size
(0 while a put is in flight, or after a writer crashed) treats the key as absent. ``get`` returns
read-only numpy views into the mapping (zero copy); they stay valid after ``delete`` unlinks the
name, until the last view is dropped.
"""

from __future__ import annotations

import hashlib
import logging
import re
import struct

from nimbus.core import Store as Store  # the contract itself lives in core.py
from nimbus.data.codec import Message, decode, encode_into, encoded_size, frame_plan
from nimbus.data.shm import SHM_DIR, Segment, list_segments, run_prefix, sweep, unlink

logger = logging.getLogger(__name__)

MAX_KEY_CHARS = 200
_KEY_RE = re.compile(r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*\Z")
_NAMESPACE_RE = re.compile(r"[a-z0-9]{1,8}\Z")
_SEP = "~"  # stands for "/" in segment names; not a legal key character, so names decode back to keys
_COMMIT = struct.Struct("<Q")
_WRITER_BYTES = 24
_NO_WRITER = bytes(_WRITER_BYTES)
_FRAME_OFFSET = _COMMIT.size + _WRITER_BYTES  # 32: keeps the codec's 8-byte-aligned data section aligned


class KeyNotFound(KeyError):
    """No committed value under this key."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(key)

    def __str__(self) -> str:
        return f"no value under key {self.key!r}"


class KeyExists(ValueError):
    """A put of a key that already holds a value (values are immutable, except to their own writer)."""


def validate_key(key: str) -> str:
    """Return ``key`` if legal: path components of ``[A-Za-z0-9_.-]``, at most MAX_KEY_CHARS chars."""
    if not isinstance(key, str) or len(key) > MAX_KEY_CHARS or not _KEY_RE.match(key):
        raise ValueError(
            f"invalid store key {key!r}: use '/'-separated components of letters, digits, '_', '.', '-' "
            f"(no empty component), at most {MAX_KEY_CHARS} characters")
    return key


def writer_tag(writer: str | None) -> bytes:
    """The fixed-size tag a backend keeps next to a value to recognise its writer (zeros: no writer)."""
    if writer is None:
        return _NO_WRITER
    if not isinstance(writer, str) or not writer:
        raise ValueError(f"a store writer must be a non-empty string, not {writer!r}")
    return hashlib.blake2b(writer.encode(), digest_size=_WRITER_BYTES).digest()


def key_version(key: str) -> int | None:
    """The integer last path component of ``key`` (``weights/main/12`` → 12), or None."""
    last = key.rsplit("/", 1)[-1]
    return int(last) if last.isdigit() else None


def under_prefix(key: str, prefix: str) -> bool:
    """Path-wise prefix test: ``weights/main/3`` is under ``weights/main`` but ``weights/main2/3`` is not."""
    prefix = prefix.rstrip("/")
    return not prefix or key.startswith(prefix + "/")


class ShmStore:
    """The ``shm`` Store backend: one named shared-memory segment per key, usable from any process of the run.

    ``namespace`` separates stores of one run (segment names are ``<run prefix><namespace>_<key>``
    with ``/`` written as ``~``, e.g. ``nimbus_4242_st_weights~main~12``). ``owner=True`` (the driver)
    makes ``close()`` unlink every value of the namespace; workers use the default ``owner=False``,
    whose ``close()`` leaves values in place, since what a worker puts outlives the worker.

    Example::

        store = ShmStore(owner=True)                       # driver
        store.put(key="weights/main/0", message=Message(arrays={"w": np.ones(3, np.float32)}))
        ShmStore().get(key="weights/main/0").arrays["w"]   # any process with the same NIMBUS_SHM_PREFIX
        store.close()                                      # unlinks weights/main/0
    """

    def __init__(self, *, namespace: str = "st", owner: bool = False) -> None:
        if not _NAMESPACE_RE.match(namespace):
            raise ValueError(f"invalid store namespace {namespace!r}: 1-8 characters of [a-z0-9]")
        self.namespace = namespace
        self.owner = owner
        self._name_prefix = f"{run_prefix()}{namespace}_"
        self._closed = False

    def segment_of(self, *, key: str) -> str:
        """The shared-memory segment name that holds ``key``."""
        return self._name_prefix + validate_key(key).replace("/", _SEP)

    def put(self, *, key: str, message: Message, writer: str | None = None) -> None:
        """Write ``message`` under ``key`` (one copy of each array). Raises KeyExists if it is taken, unless
        by the same ``writer`` (see the module docstring): then the value is replaced."""
        name = self.segment_of(key=key)
        tag = writer_tag(writer)
        plan = frame_plan(message)  # laid out once for both the size and the write
        frame_bytes = encoded_size(message, plan=plan)
        segment = self._create(name=name, key=key, tag=tag, size_bytes=_FRAME_OFFSET + frame_bytes)
        try:
            segment.buffer[_COMMIT.size:_FRAME_OFFSET] = tag
            encode_into(message, segment.buffer[_FRAME_OFFSET:], plan=plan)
            _COMMIT.pack_into(segment.buffer, 0, frame_bytes)  # the commit point: written last
        except BaseException:
            unlink(name=name)
            raise
        finally:
            segment.close()

    def _create(self, *, name: str, key: str, tag: bytes, size_bytes: int) -> Segment:
        try:
            return Segment.create(name=name, size_bytes=size_bytes)
        except FileExistsError:
            found = self._committed_tag(name=name)
            if found is not None and (tag == _NO_WRITER or found != tag):
                raise KeyExists(f"store key {key!r} already holds a value; values are immutable") from None
        if found is not None:  # the same writer: a retried attempt redoes its own put
            logger.info("store key %r: replaced by a retry of the attempt that wrote it", key)
        else:  # an uncommitted leftover (a writer crashed or was superseded mid-put): replace it
            logger.warning("store key %r: replacing an uncommitted value left by an interrupted put", key)
        unlink(name=name)
        return Segment.create(name=name, size_bytes=size_bytes)

    def get(self, *, key: str) -> Message:
        """The value under ``key``; its arrays are read-only views into shared memory."""
        segment = self._attach(name=self.segment_of(key=key))
        length = None if segment is None else _read_committed(segment)
        if length is None:
            if segment is not None:
                segment.close()
            raise KeyNotFound(key)
        message = decode(segment.buffer[_FRAME_OFFSET:_FRAME_OFFSET + length])
        for array in message.arrays.values():
            array.flags.writeable = False
        # The views keep the mapping alive; dropping `segment` here does not unmap it.
        return message

    def latest(self, *, prefix: str) -> str | None:
        """The committed key under ``prefix`` with the highest integer last component, or None."""
        versioned = [(v, k) for k in self._listed(prefix=prefix) if (v := key_version(k)) is not None]
        for _, key in sorted(versioned, reverse=True):
            if self._committed_len(name=self.segment_of(key=key)) is not None:
                return key
        return None

    def keys(self, *, prefix: str) -> list[str]:
        """Committed keys under ``prefix`` (path-wise; ``""`` lists all), sorted."""
        return [k for k in self._listed(prefix=prefix)
                if self._committed_len(name=self.segment_of(key=k)) is not None]

    def delete(self, *, key: str) -> None:
        """Unlink ``key``; views already returned by ``get`` stay valid. Deleting an absent key is a no-op."""
        if not unlink(name=self.segment_of(key=key)):
            logger.debug("store delete of absent key %r", key)

    def close(self) -> None:
        """Owner: unlink every value of this namespace. Otherwise nothing to release."""
        if self._closed:
            return
        self._closed = True
        if self.owner:
            removed = sweep(prefix=self._name_prefix)
            logger.debug("store %r closed, %d value(s) unlinked", self.namespace, removed)

    def __enter__(self) -> ShmStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _listed(self, *, prefix: str) -> list[str]:
        """Keys (committed or not) whose segments exist under ``prefix``."""
        head = len(self._name_prefix)
        names = list_segments(prefix=self._name_prefix)
        return sorted(k for name in names if under_prefix(k := name[head:].replace(_SEP, "/"), prefix))

    def _committed_len(self, *, name: str) -> int | None:
        segment = self._attach(name=name)
        if segment is None:
            return None
        try:
            return _read_committed(segment)
        finally:
            segment.close()

    def _committed_tag(self, *, name: str) -> bytes | None:
        """The writer tag of a committed value, or None if there is none."""
        segment = self._attach(name=name)
        if segment is None:
            return None
        try:
            return None if _read_committed(segment) is None else bytes(segment.buffer[_COMMIT.size:_FRAME_OFFSET])
        finally:
            segment.close()

    @staticmethod
    def _attach(*, name: str) -> Segment | None:
        try:
            if SHM_DIR.is_dir() and (SHM_DIR / name).stat().st_size == 0:
                return None  # created, not yet sized: absent (and attach would fail)
            return Segment.attach(name=name)
        except (FileNotFoundError, ValueError):  # ValueError: size still 0, the creator has not truncated yet
            return None


def _read_committed(segment: Segment) -> int | None:
    """The frame length if the segment's put completed, else None (absent)."""
    if segment.size_bytes < _FRAME_OFFSET:
        return None
    (length,) = _COMMIT.unpack_from(segment.buffer, 0)
    # A complete put writes exactly the frame size; 0 (in flight) or anything else means not committed.
    return length if length and length == segment.size_bytes - _FRAME_OFFSET else None
