"""The Buffer's shared-memory blocks (data/buffer.py): where its rows live, apart from what they mean.

A buffer of ``capacity_rows`` rows is one segment per data key (``capacity_rows`` × the key's per-step shape, in
its dtype), one per metadata column (``META_DTYPES``) and one header (``header_dtype``: the counters, then the
per-actor row counts and latest policy versions). Its descriptor names every segment, shape and dtype and is
JSON-able: the creator ``allocate``s the segments, another process ``attach_segments`` by descriptor, and both
``map_blocks`` the same arrays onto them. What the rows mean (ingest, deduplication, overwrite accounting,
reads) is data/buffer.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nimbus.data.shm import Segment, check_room, segment_name

DESCRIPTOR_VERSION = 1
META_DTYPES = {"actor_rank": "int32", "policy_version": "int64", "ingest_seq": "int64", "read_flag": "uint8"}
_COUNTERS = ("capacity_rows", "max_actors", "write_index", "size_rows", "total_rows", "total_ingests",
             "duplicate_ingests", "overwritten_rows", "overwritten_unread_rows", "latest_policy_version")


def header_dtype(*, max_actors: int) -> np.dtype:
    """The header block: one int64 per counter, then ``rows_by_actor`` and ``version_by_actor`` (max_actors each)."""
    fields = [(name, "<i8") for name in _COUNTERS]
    return np.dtype(fields + [("rows_by_actor", "<i8", (max_actors,)), ("version_by_actor", "<i8", (max_actors,))])


@dataclass(frozen=True)
class Blocks:
    """A buffer's arrays, mapped onto its segments (writes go to shared memory)."""

    columns: dict[str, np.ndarray]   # data key → (capacity_rows, *per-step shape)
    meta: dict[str, np.ndarray]      # META_DTYPES name → (capacity_rows,)
    header: np.ndarray               # a 0-d record of header_dtype


def allocate(*, keys: dict[str, dict[str, Any]], capacity_rows: int,
             max_actors: int) -> tuple[dict[str, Any], list[Segment]]:
    """Create a new buffer's segments (the creator's side): its descriptor and the segments, data keys first, then
    the metadata columns, the header last. ``keys``: data key → ``{"shape": [...], "dtype": name}``. Checks the
    room first (data/shm.py); if one segment cannot be made, the ones made are unlinked."""
    sizes = {key: capacity_rows * int(np.prod(d["shape"], dtype=np.int64)) * np.dtype(d["dtype"]).itemsize
             for key, d in keys.items()}
    meta_sizes = {name: capacity_rows * np.dtype(dt).itemsize for name, dt in META_DTYPES.items()}
    header_size = header_dtype(max_actors=max_actors).itemsize
    check_room(total_bytes=sum(sizes.values()) + sum(meta_sizes.values()) + header_size)
    keys = {key: dict(d) for key, d in keys.items()}
    segments: list[Segment] = []
    try:
        for key in keys:
            segments.append(Segment.create(name=segment_name(kind="bk"), size_bytes=sizes[key]))
            keys[key]["segment"] = segments[-1].name
        meta = {}
        for name, dt in META_DTYPES.items():
            segments.append(Segment.create(name=segment_name(kind="bm"), size_bytes=meta_sizes[name]))
            meta[name] = {"segment": segments[-1].name, "dtype": dt}
        segments.append(Segment.create(name=segment_name(kind="bh"), size_bytes=header_size))
    except BaseException:
        for segment in segments:
            segment.close()
            segment.unlink()
        raise
    descriptor = {"version": DESCRIPTOR_VERSION, "capacity_rows": capacity_rows, "max_actors": max_actors,
                  "keys": keys, "meta": meta, "header": segments[-1].name}
    return descriptor, segments


def attach_segments(*, descriptor: dict[str, Any]) -> list[Segment]:
    """Open an existing buffer's segments by its descriptor (another process's side); if one is missing, the ones
    opened are closed again."""
    if descriptor.get("version") != DESCRIPTOR_VERSION:
        raise ValueError(f"buffer descriptor version {descriptor.get('version')!r} is not {DESCRIPTOR_VERSION}")
    names = [d["segment"] for d in descriptor["keys"].values()]
    names += [d["segment"] for d in descriptor["meta"].values()] + [descriptor["header"]]
    segments: list[Segment] = []
    try:
        for name in names:
            segments.append(Segment.attach(name=name))
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments


def map_blocks(*, descriptor: dict[str, Any], segments: list[Segment]) -> Blocks:
    """The arrays the descriptor lays out on ``segments`` (zero-copy)."""
    by_name = {segment.name: segment for segment in segments}
    capacity = int(descriptor["capacity_rows"])
    columns = {key: _array(segment=by_name[d["segment"]], shape=(capacity, *d["shape"]), dtype=d["dtype"])
               for key, d in descriptor["keys"].items()}
    meta = {name: _array(segment=by_name[d["segment"]], shape=(capacity,), dtype=d["dtype"])
            for name, d in descriptor["meta"].items()}
    header = np.ndarray(shape=(), dtype=header_dtype(max_actors=int(descriptor["max_actors"])),
                        buffer=by_name[descriptor["header"]].buffer)
    return Blocks(columns=columns, meta=meta, header=header)


def _array(*, segment: Segment, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return np.ndarray(shape=shape, dtype=np.dtype(dtype), buffer=segment.buffer)
