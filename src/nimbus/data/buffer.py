"""Buffer: ARTOS's cyclic shared-memory experience buffer (ARTOS §4.2 / Fig. 9).

Declared by a spec (data key → per-step shape and dtype) and a capacity in rows. Each data key is
one cyclic shared-memory block of ``capacity_rows`` rows; beside them live per-row metadata columns
(``actor_rank`` int32, ``policy_version`` int64, ``ingest_seq`` int64 — the row's global sequence
number, 0, 1, 2, ... in ingest order — and ``read_flag`` uint8) and one header block (write index,
size, totals, per-actor row counts and latest versions, overwrite counters).

Rows are addressed by *position* (0 ≤ position < size_rows, the physical row in the blocks). An
ingest of n rows writes positions ``write_index, write_index + 1, ...`` modulo capacity: contiguous
unless it wraps, in which case the ``IngestEvent`` carries two ``slices``, ``(w, capacity)`` then
``(0, rest)``. When the buffer is full the oldest rows are overwritten; rows overwritten before
anyone called ``mark_read`` on them are counted (``overwritten_unread_rows``).

One writer: the process that created the buffer ingests, from one thread at a time (idempotently
per invocation id, P2; the last ``dedup_window`` ids are remembered).
Other processes ``attach`` by descriptor and read rows zero-copy. Readers in other processes see a
row once the header's counters include it (the header is updated last); a reader that holds
positions while the writer wraps over them sees newer rows (check ``ingest_seq``). The blocks themselves
(segments, descriptor, header layout) are data/buffer_blocks.py's.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nimbus.data.buffer_blocks import META_DTYPES, allocate, attach_segments, header_dtype, map_blocks
from nimbus.data.shm import Segment

if TYPE_CHECKING:
    from nimbus.algos.base import KeySpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestEvent:
    """What a listener learns after an accepted ingest. ``slices``: the (start, stop) positions written."""

    invocation_id: str
    actor_rank: int
    policy_version: int
    rows: int
    first_seq: int
    slices: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class BufferStats:
    capacity_rows: int
    size_rows: int
    total_rows_ingested: int
    total_ingests: int
    duplicate_ingests: int
    overwritten_rows: int
    overwritten_unread_rows: int
    latest_policy_version: int
    actors_seen: int


class Buffer:
    """A cyclic shared-memory buffer of rows.

    Example::

        buf = Buffer.create(spec={"obs": KeySpec(shape=(4,), dtype="float32"),
                                  "reward": KeySpec(shape=(), dtype="float32")}, capacity_rows=1024)
        buf.ingest(invocation_id="actor-3/round-7", actor_rank=3, policy_version=7,
                   arrays={"obs": np.zeros((128, 4)), "reward": np.zeros(128)})     # True
        batch = buf.read(indices=np.arange(128))                                       # gathered copies
        # in another process:
        reader = Buffer.attach(descriptor=buf.descriptor())    # descriptor is JSON-able
        obs = reader.rows(start=0, stop=128)["obs"]             # zero-copy, read-only
        reader.close(); buf.close(unlink=True)
    """

    def __init__(self, *, descriptor: dict[str, Any], segments: list[Segment], owner: bool,
                 dedup_window: int = 0) -> None:
        """Internal: use ``Buffer.create`` or ``Buffer.attach``."""
        self._descriptor = descriptor
        self._segments = segments
        self._owner = owner
        blocks = map_blocks(descriptor=descriptor, segments=segments)
        self._columns, self._meta, self._header = blocks.columns, blocks.meta, blocks.header
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._dedup_window = dedup_window
        self._listeners: list[Callable[[IngestEvent], None]] = []

    # ----------------------------------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, *, spec: dict[str, KeySpec], capacity_rows: int, max_actors: int = 1024,
               dedup_window: int = 65536) -> Buffer:
        """Allocate the blocks (driver side). ``dedup_window``: how many recent invocation ids are remembered."""
        if capacity_rows < 1 or max_actors < 1 or not spec:
            raise ValueError(f"buffer needs capacity_rows ≥ 1 (got {capacity_rows}), max_actors ≥ 1 "
                             f"(got {max_actors}) and a non-empty spec")
        keys = {key: {"shape": [int(d) for d in s.shape], "dtype": np.dtype(s.dtype).name} for key, s in spec.items()}
        descriptor, segments = allocate(keys=keys, capacity_rows=capacity_rows, max_actors=max_actors)
        buffer = cls(descriptor=descriptor, segments=segments, owner=True, dedup_window=dedup_window)
        buffer._init_header()
        return buffer

    def _init_header(self) -> None:
        header = self._header
        header["capacity_rows"] = self.capacity_rows
        header["max_actors"] = self.max_actors
        header["latest_policy_version"] = -1
        header["version_by_actor"] = -1

    @classmethod
    def attach(cls, *, descriptor: dict[str, Any]) -> Buffer:
        """Map an existing buffer (worker side). The result reads; only the creator ingests."""
        buffer = cls(descriptor=descriptor, segments=attach_segments(descriptor=descriptor), owner=False)
        if int(buffer._header["capacity_rows"]) != buffer.capacity_rows:
            buffer.close(unlink=False)
            raise ValueError(f"buffer header {descriptor['header']!r} does not match its descriptor")
        return buffer

    def descriptor(self) -> dict[str, Any]:
        """JSON-able description (segment names, shapes, dtypes, capacity) for ``Buffer.attach``."""
        return {**self._descriptor, "keys": {k: dict(d) for k, d in self._descriptor["keys"].items()},
                "meta": {k: dict(d) for k, d in self._descriptor["meta"].items()}}

    def close(self, *, unlink: bool | None = None) -> None:
        """Unmap; unlink the segments too if ``unlink`` (default: if this buffer created them)."""
        unlink = self._owner if unlink is None else unlink
        self._columns, self._meta, self._header = {}, {}, np.zeros((), header_dtype(max_actors=self.max_actors))
        for segment in self._segments:
            segment.close()
            if unlink:
                segment.unlink()
        self._segments = []

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------- writing
    def ingest(self, *, invocation_id: str, actor_rank: int, policy_version: int,
               arrays: dict[str, np.ndarray]) -> bool:
        """Append rows (leading dim); False, changing nothing, if ``invocation_id`` was already ingested."""
        if not self._owner:
            raise RuntimeError("an attached buffer is read-only: only the process that created it ingests")
        if invocation_id in self._seen:
            self._header["duplicate_ingests"] += 1
            logger.debug("duplicate ingest of invocation %s dropped", invocation_id)
            return False
        arrays = {key: np.asarray(value) for key, value in arrays.items()}
        rows = self._validate(actor_rank=actor_rank, arrays=arrays)
        first_seq = int(self._header["total_rows"])
        slices = self._write(rows=rows, actor_rank=actor_rank, policy_version=policy_version, arrays=arrays)
        self._remember(invocation_id)
        event = IngestEvent(invocation_id=invocation_id, actor_rank=actor_rank, policy_version=policy_version,
                            rows=rows, first_seq=first_seq, slices=slices)
        for callback in list(self._listeners):
            callback(event)
        return True

    def _validate(self, *, actor_rank: int, arrays: dict[str, np.ndarray]) -> int:
        if not 0 <= actor_rank < self.max_actors:
            raise ValueError(f"actor_rank {actor_rank} outside [0, {self.max_actors}) (max_actors)")
        unknown = sorted(set(arrays) - set(self._columns))
        missing = sorted(set(self._columns) - set(arrays))
        if unknown or missing:
            raise ValueError(f"ingest keys do not match the buffer spec: missing {missing}, unknown {unknown}")
        rows = None
        for key, column in self._columns.items():
            shape = np.shape(arrays[key])
            if len(shape) < 1 or tuple(shape[1:]) != column.shape[1:]:
                raise ValueError(f"key {key!r}: expected shape (rows, {', '.join(map(str, column.shape[1:]))}) "
                                 f"i.e. per-step {column.shape[1:]}, got {tuple(shape)}")
            if rows is not None and shape[0] != rows:
                raise ValueError(f"key {key!r}: {shape[0]} rows, but other keys have {rows}")
            rows = shape[0]
        if rows > self.capacity_rows:
            raise ValueError(f"ingest of {rows} rows exceeds the buffer capacity of {self.capacity_rows} rows")
        return int(rows)

    def _write(self, *, rows: int, actor_rank: int, policy_version: int,
               arrays: dict[str, np.ndarray]) -> tuple[tuple[int, int], ...]:
        header, capacity = self._header, self.capacity_rows
        start, size, total = int(header["write_index"]), int(header["size_rows"]), int(header["total_rows"])
        slices = _slices(start=start, rows=rows, capacity=capacity)
        overwritten = unread = offset = 0
        for a, b in slices:
            if a < size:  # positions [a, min(b, size)) held rows: count what is lost
                overwritten += min(b, size) - a
                unread += int(np.count_nonzero(self._meta["read_flag"][a:min(b, size)] == 0))
            for key, column in self._columns.items():
                column[a:b] = arrays[key][offset:offset + b - a]  # casts to the spec dtype
            self._meta["actor_rank"][a:b] = actor_rank
            self._meta["policy_version"][a:b] = policy_version
            self._meta["ingest_seq"][a:b] = np.arange(total + offset, total + offset + b - a)
            self._meta["read_flag"][a:b] = 0
            offset += b - a
        if unread:
            logger.debug("buffer overwrote %d unread rows", unread)
        header["overwritten_rows"] += overwritten
        header["overwritten_unread_rows"] += unread
        header["rows_by_actor"][actor_rank] += rows
        header["version_by_actor"][actor_rank] = max(int(header["version_by_actor"][actor_rank]), policy_version)
        header["latest_policy_version"] = max(int(header["latest_policy_version"]), policy_version)
        header["total_ingests"] += 1
        header["write_index"] = (start + rows) % capacity
        header["size_rows"] = min(size + rows, capacity)
        header["total_rows"] = total + rows  # last: readers in other processes key off it
        return slices

    def _remember(self, invocation_id: str) -> None:
        self._seen[invocation_id] = None
        while len(self._seen) > self._dedup_window:
            self._seen.popitem(last=False)

    def held_rows(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Copies of every held row, oldest first: (columns, meta incl. ``read_flag``), for a checkpoint."""
        positions = self.positions_since(seq=0)
        return ({key: self._column(key)[positions] for key in self.keys},
                {name: self._meta[name][positions] for name in META_DTYPES})

    def restore_rows(self, *, columns: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        """Refill an empty buffer with ``held_rows()`` of another: each row at ``ingest_seq % capacity``, so
        sequence numbers (FIFO, PER, stale-row checks) continue; only the newest ``capacity`` rows fit."""
        if self.size_rows or not self._owner:
            raise RuntimeError("restore_rows needs an empty buffer this process owns")
        seqs = np.asarray(meta["ingest_seq"], dtype=np.int64)[-self.capacity_rows:]
        keep = slice(len(meta["ingest_seq"]) - len(seqs), None)
        if len(seqs) and np.any(np.diff(seqs) != 1):
            raise ValueError("restored rows must be consecutive ingest sequence numbers, oldest first")
        positions = seqs % self.capacity_rows
        for key, column in self._columns.items():
            column[positions] = np.asarray(columns[key])[keep]
        for name in META_DTYPES:
            self._meta[name][positions] = np.asarray(meta[name])[keep]
        header, total = self._header, int(seqs[-1]) + 1 if len(seqs) else 0
        ranks, counts = np.unique(self._meta["actor_rank"][positions], return_counts=True)
        header["rows_by_actor"][ranks] = counts
        header["latest_policy_version"] = int(self._meta["policy_version"][positions].max(initial=0))
        header["write_index"] = total % self.capacity_rows
        header["size_rows"] = len(seqs)
        header["total_rows"] = total

    def mark_read(self, *, indices: np.ndarray) -> None:
        """Flag rows as consumed, so overwriting them later is not counted as data lost unread."""
        self._meta["read_flag"][self._positions(indices)] = 1

    def subscribe(self, *, callback: Callable[[IngestEvent], None]) -> Callable[[], None]:
        """Call ``callback(event)`` after every accepted ingest (in the ingesting thread); returns unsubscribe."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    # ------------------------------------------------------------------------------------- reading
    def read(self, *, indices: np.ndarray, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        """Gathered copies of the rows at ``indices`` (positions), in that order."""
        positions = self._positions(indices)
        return {key: self._column(key)[positions] for key in (self.keys if keys is None else keys)}

    def read_meta(self, *, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of ``actor_rank``, ``policy_version`` and ``ingest_seq`` at ``indices``."""
        positions = self._positions(indices)
        return {name: self._meta[name][positions] for name in ("actor_rank", "policy_version", "ingest_seq")}

    def rows(self, *, start: int, stop: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        """Zero-copy read-only views of positions [start, stop)."""
        if not 0 <= start <= stop <= self.size_rows:
            raise IndexError(f"rows [{start}, {stop}) outside the buffer's filled [0, {self.size_rows})")
        views = {}
        for key in self.keys if keys is None else keys:
            views[key] = self._column(key)[start:stop]
            views[key].flags.writeable = False
        return views

    def positions_since(self, *, seq: int) -> np.ndarray:
        """Positions of the rows still held whose ``ingest_seq`` ≥ ``seq``, oldest first."""
        count = max(0, min(self.total_rows_ingested - seq, self.size_rows))
        return (self.write_index - count + np.arange(count, dtype=np.int64)) % self.capacity_rows

    def _column(self, key: str) -> np.ndarray:
        if key not in self._columns:
            raise KeyError(f"buffer has no key {key!r}; keys are {sorted(self._columns)}")
        return self._columns[key]

    def _positions(self, indices: np.ndarray) -> np.ndarray:
        positions = np.asarray(indices, dtype=np.int64)
        if positions.ndim != 1:
            raise ValueError(f"indices must be 1-D, got shape {positions.shape}")
        size = self.size_rows
        if positions.size and (positions.min() < 0 or positions.max() >= size):
            raise IndexError(f"indices outside the buffer's filled positions [0, {size})")
        return positions

    # ------------------------------------------------------------------------------------ counters
    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._descriptor["keys"])

    @property
    def capacity_rows(self) -> int:
        return int(self._descriptor["capacity_rows"])

    @property
    def max_actors(self) -> int:
        return int(self._descriptor["max_actors"])

    @property
    def size_rows(self) -> int:
        return int(self._header["size_rows"])

    @property
    def total_rows_ingested(self) -> int:
        return int(self._header["total_rows"])

    @property
    def write_index(self) -> int:
        return int(self._header["write_index"])

    def rows_by_actor(self) -> dict[int, int]:
        """Rows ingested so far per actor rank (actors with none are left out)."""
        counts = self._header["rows_by_actor"]
        return {int(rank): int(counts[rank]) for rank in np.flatnonzero(counts)}

    def actor_row_counts(self) -> np.ndarray:
        """A copy of the per-actor row counts, indexed by actor rank (length max_actors)."""
        return np.array(self._header["rows_by_actor"])

    def versions_by_actor(self) -> dict[int, int]:
        """The highest policy_version ingested per actor rank."""
        versions = self._header["version_by_actor"]
        return {int(rank): int(versions[rank]) for rank in np.flatnonzero(versions >= 0)}

    def stats(self) -> BufferStats:
        h = self._header
        return BufferStats(
            capacity_rows=self.capacity_rows, size_rows=int(h["size_rows"]), total_rows_ingested=int(h["total_rows"]),
            total_ingests=int(h["total_ingests"]), duplicate_ingests=int(h["duplicate_ingests"]),
            overwritten_rows=int(h["overwritten_rows"]), overwritten_unread_rows=int(h["overwritten_unread_rows"]),
            latest_policy_version=int(h["latest_policy_version"]),
            actors_seen=int(np.count_nonzero(h["rows_by_actor"])))


def _slices(*, start: int, rows: int, capacity: int) -> tuple[tuple[int, int], ...]:
    """The (start, stop) position ranges ``rows`` rows take from ``start``: one, or two if they wrap."""
    if start + rows <= capacity:
        return ((start, start + rows),)
    return ((start, capacity), (0, start + rows - capacity))
