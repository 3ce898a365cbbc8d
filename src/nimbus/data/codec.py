"""Wire format: a dict of numpy arrays plus a small JSON header, as a safetensors frame.

Nothing that crosses a process boundary is pickled. A frame is::

    b"NMBF" | version u8 | flags u8 | reserved u16 | body

where body is a safetensors file (its ``__metadata__`` carries the JSON header under ``"nimbus"``),
LZ4-frame-compressed when the FLAG_LZ4 bit is set. Bodies are written by this module directly into a
caller's buffer (``encode_into``) so a sender copies each array exactly once, and decoded as numpy
views over the caller's buffer (``decode``), so a receiver of an uncompressed frame copies nothing
(a compressed one is decompressed into private memory once).

Example::

    frame = encode(Message(header={"round": 3}, arrays={"obs": np.zeros((4, 2), np.float32)}))
    msg = decode(frame)
    assert msg.header["round"] == 3 and msg.arrays["obs"].shape == (4, 2)
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import lz4.frame
import numpy as np

from nimbus.errors import CodecError

MAGIC = b"NMBF"
VERSION = 1
FLAG_LZ4 = 1
PREFIX = struct.Struct("<4sBBH")
DEFAULT_COMPRESS_MIN_BYTES = 1 << 20
LZ4_MAX_RATIO = 256  # LZ4's format cannot expand more than ~255:1 (all zeros: 242:1 measured)
MAX_DIMS = 32  # a frame's arrays have at most this many dimensions (numpy's own limit is 64)
MAX_ARRAY_BYTES = int(np.iinfo(np.intp).max)  # numpy refuses an array whose nonzero dims x itemsize exceed this

_DTYPE_TO_ST = {
    np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
    np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16", np.dtype(np.int8): "I8",
    np.dtype(np.uint64): "U64", np.dtype(np.uint32): "U32", np.dtype(np.uint16): "U16", np.dtype(np.uint8): "U8",
    np.dtype(np.bool_): "BOOL",
}
_ST_TO_DTYPE = {v: k for k, v in _DTYPE_TO_ST.items()}


@dataclass(frozen=True)
class Message:
    """What every function, channel and store exchanges: a JSON-able header and named arrays."""

    header: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


_CACHE_ENTRIES = 256  # layouts remembered per process: a run sends the same few shapes over and over
_plans: dict[tuple[str, tuple[tuple[str, str, tuple[int, ...]], ...]], tuple[bytes, list[int], int]] = {}
_layouts: dict[str, list[tuple[str, np.dtype, list[int], int, int]]] = {}


def _remember(cache: dict, key: Any, value: Any) -> Any:
    """Store ``value`` in a bounded cache (cleared when full: a run's few layouts come back at once)."""
    if len(cache) >= _CACHE_ENTRIES:
        cache.clear()
    cache[key] = value
    return value


def _plan(message: Message) -> tuple[bytes, list[tuple[np.ndarray, int]], int]:
    """Safetensors header bytes, each array with its data offset, and the body size.

    The header bytes and offsets of a (header, names, dtypes, shapes) combination are computed once
    per process; the per-message cost is then one small ``json.dumps`` of the header."""
    arrays: list[np.ndarray] = []
    signature: list[tuple[str, str, tuple[int, ...]]] = []
    for name in sorted(message.arrays):
        array = np.asarray(message.arrays[name])
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        if array.dtype not in _DTYPE_TO_ST:
            raise CodecError(f"array {name!r}: dtype {array.dtype} is not supported by the codec")
        arrays.append(array)
        signature.append((name, _DTYPE_TO_ST[array.dtype], array.shape))
    key = (json.dumps(message.header, separators=(",", ":")), tuple(signature))
    cached = _plans.get(key)
    if cached is None:
        cached = _remember(_plans, key, _build_plan(meta=key[0], signature=signature, arrays=arrays))
    header, offsets, body_size = cached
    return header, list(zip(arrays, offsets)), body_size


def _build_plan(*, meta: str, signature: list[tuple[str, str, tuple[int, ...]]],
                arrays: list[np.ndarray]) -> tuple[bytes, list[int], int]:
    entries: dict[str, Any] = {"__metadata__": {"nimbus": meta}}
    offsets: list[int] = []
    offset = 0
    for (name, dtype, shape), array in zip(signature, arrays):
        entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + array.nbytes]}
        offsets.append(offset)
        offset += array.nbytes
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # safetensors aligns the data section to 8 bytes
    return header, offsets, 8 + len(header) + offset


FramePlan = tuple  # (safetensors header bytes, [(array, data offset)], body size): from ``frame_plan``


def frame_plan(message: Message) -> FramePlan:
    """Lay out ``message`` once (dtype checks, JSON header); pass it to ``encode_into`` to skip re-planning."""
    return _plan(message)


def encoded_size(message: Message, *, plan: FramePlan | None = None) -> int:
    """Bytes ``encode_into`` will write for this message (uncompressed)."""
    return PREFIX.size + (plan if plan is not None else _plan(message))[2]


def encode_into(message: Message, out: memoryview, *, plan: FramePlan | None = None) -> int:
    """Write the uncompressed frame into ``out``; returns the number of bytes written."""
    header, layout, body_size = plan if plan is not None else _plan(message)
    total = PREFIX.size + body_size
    if len(out) < total:
        raise CodecError(f"output buffer of {len(out)} bytes is smaller than the frame ({total} bytes)")
    PREFIX.pack_into(out, 0, MAGIC, VERSION, 0, 0)
    struct.pack_into("<Q", out, PREFIX.size, len(header))
    start = PREFIX.size + 8
    out[start:start + len(header)] = header
    data_start = start + len(header)
    for array, offset in layout:
        if array.nbytes:
            target = np.frombuffer(out, dtype=np.uint8, count=array.nbytes, offset=data_start + offset)
            target[:] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return total


def encode(message: Message, *, compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES) -> bytes:
    """The frame as bytes; LZ4-compressed when it is at least ``compress_min_bytes`` (None: never)."""
    if not message.arrays:  # header-only frames (channel headers): the hot path, built directly
        meta = json.dumps(message.header, separators=(",", ":"))
        header = json.dumps({"__metadata__": {"nimbus": meta}}, separators=(",", ":")).encode()
        header += b" " * (-len(header) % 8)
        return PREFIX.pack(MAGIC, VERSION, 0, 0) + struct.pack("<Q", len(header)) + header
    frame = bytearray(encoded_size(message))
    encode_into(message, memoryview(frame))
    if compress_min_bytes is not None and len(frame) >= compress_min_bytes and worth_compressing(frame):
        packed = compress(bytes(frame))
        if len(packed) < len(frame):
            return packed
    return bytes(frame)


def worth_compressing(frame: bytes | bytearray | memoryview, *, probe_bytes: int = 256 << 10,
                      min_saving: float = 0.1) -> bool:
    """Does LZ4 shrink a probe from the middle of ``frame`` by at least ``min_saving``? (Random floats do
    not: skipping them costs one small probe instead of compressing the whole body for nothing.)"""
    if len(frame) <= 2 * probe_bytes:
        return True
    middle = len(frame) // 2
    probe = lz4.frame.compress(memoryview(frame)[middle:middle + probe_bytes], compression_level=0)
    return len(probe) < (1.0 - min_saving) * probe_bytes


def compress(frame: bytes) -> bytes:
    """LZ4-compress an uncompressed frame's body, keeping the prefix readable."""
    body = lz4.frame.compress(memoryview(frame)[PREFIX.size:], compression_level=0)
    return PREFIX.pack(MAGIC, VERSION, FLAG_LZ4, 0) + body


def decode(frame: bytes | bytearray | memoryview | np.ndarray, *, copy: bool = False,
           max_decompressed_bytes: int | None = None) -> Message:
    """Parse a frame. Arrays are read-only views into ``frame`` unless ``copy`` (or the frame is compressed).

    Given a 1-D uint8 ndarray, every array is a view *of that array* (its ``.base``), so the caller can
    tell when the last view is gone (channel slot leases). A compressed frame that claims more than
    ``max_decompressed_bytes`` is refused before anything is allocated.
    """
    root = frame if isinstance(frame, np.ndarray) else None
    view = memoryview(frame)
    if len(view) < PREFIX.size + 8:
        raise CodecError(f"frame of {len(view)} bytes is too short")
    magic, version, flags, _ = PREFIX.unpack_from(view, 0)
    if magic != MAGIC:
        raise CodecError(f"not a nimbus frame (magic {bytes(magic)!r})")
    if version != VERSION:
        raise CodecError(f"frame version {version} is not supported (this nimbus reads version {VERSION})")
    if flags & ~FLAG_LZ4:
        raise CodecError(f"frame has flags {flags:#x} this decoder does not know (a channel slot header?)")
    body = view[PREFIX.size:]
    if flags & FLAG_LZ4:
        body = _decompress(body, max_bytes=max_decompressed_bytes)
        copy, root = False, None  # already a private buffer
    if len(body) < 8:
        raise CodecError(f"frame body of {len(body)} bytes is too short for its header length")
    (header_len,) = struct.unpack_from("<Q", body, 0)
    if 8 + header_len > len(body):
        raise CodecError("frame truncated inside its header")
    meta, entries = _layout(bytes(body[8:8 + header_len]))
    try:
        header = json.loads(meta)
    except (ValueError, RecursionError) as exc:
        raise CodecError(f"frame header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise CodecError(f"frame header is a JSON {type(header).__name__}, not an object")
    data_start = 8 + header_len
    data = body[data_start:]
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, shape, begin, end in entries:
        if end > len(data):
            raise CodecError(f"array {name!r} is truncated ({end} bytes needed, {len(data)} present)")
        if end == begin:  # an empty array: the layout check made prod(shape) == 0
            array = np.zeros(shape, dtype=dtype)
        elif root is not None:
            start = PREFIX.size + data_start
            array = root[start + begin:start + end].view(dtype).reshape(shape)
        else:
            array = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
        arrays[name] = array.copy() if copy else array
    return Message(header=header, arrays=arrays)


_META_START = b'{"__metadata__":{"nimbus":'
_DECODER = json.JSONDecoder()


def _layout(raw: bytes) -> tuple[str, list[tuple[str, np.dtype, list[int], int, int]]]:
    """The safetensors header ``raw`` parsed and checked: (nimbus metadata JSON, [(name, dtype, shape,
    begin, end)]). Bounds against the frame are checked by the caller on every frame.

    nimbus writes the metadata first; the rest of the header (the arrays' layout) repeats from message
    to message while the metadata changes, so the layout is parsed once per distinct rest, and only the
    metadata string is read per frame. Headers written otherwise are parsed whole every time."""
    rest = None
    if raw.startswith(_META_START):
        try:
            text = raw.decode()
            meta, end = _DECODER.raw_decode(text, len(_META_START))
        except (ValueError, RecursionError) as exc:
            raise CodecError(f"frame header is not valid JSON: {exc}") from exc
        rest = text[end:]
        cached = _layouts.get(rest)
        if cached is not None and isinstance(meta, str):
            return meta, cached
    full_meta, layout = _parse_layout(raw)
    if rest is not None and full_meta == meta:  # the rest does not override the metadata: safe to reuse
        _remember(_layouts, rest, layout)
    return full_meta, layout


def _parse_layout(raw: bytes) -> tuple[str, list[tuple[str, np.dtype, list[int], int, int]]]:
    try:
        entries = json.loads(raw)
        meta = entries.pop("__metadata__", {}).get("nimbus", "{}")
        layout = []
        for name, entry in entries.items():
            if entry["dtype"] not in _ST_TO_DTYPE:
                raise CodecError(f"array {name!r} has unknown dtype {entry['dtype']!r}")
            dtype = _ST_TO_DTYPE[entry["dtype"]]
            begin, end = _counts(name=name, what="data_offsets", values=entry["data_offsets"], length=2)
            shape = _counts(name=name, what="shape", values=entry["shape"], length=None)
            if begin > end or end - begin != dtype.itemsize * math.prod(shape):  # exact: no int64 wrap-around
                raise CodecError(f"array {name!r}: shape {shape} does not match its {end - begin} bytes")
            if dtype.itemsize * math.prod(d for d in shape if d) > MAX_ARRAY_BYTES:  # [0, 2**70]: empty, unmakeable
                raise CodecError(f"array {name!r}: shape {shape} is larger than numpy can represent")
            layout.append((name, dtype, shape, begin, end))
    except (ValueError, AttributeError, KeyError, TypeError, RecursionError) as exc:
        raise CodecError(f"frame header is not valid JSON: {exc}") from exc
    if not isinstance(meta, str):
        raise CodecError("frame header's nimbus metadata is not a JSON string")
    return meta, layout


def _counts(*, name: str, what: str, values: Any, length: int | None) -> list[int]:
    """Non-negative JSON integers (not floats, strings or booleans), at most ``MAX_DIMS`` of them."""
    if (not isinstance(values, list) or len(values) > MAX_DIMS or (length is not None and len(values) != length)
            or not all(type(v) is int and v >= 0 for v in values)):
        raise CodecError(f"array {name!r}: {what} {values!r} is not a list of non-negative integers")
    return values


def _decompress(body: memoryview, *, max_bytes: int | None) -> memoryview:
    """LZ4 expands at most ~255:1, so a frame that claims more than ``LZ4_MAX_RATIO`` times its own size
    is refused before anything is allocated, with or without ``max_bytes``."""
    try:
        claimed = lz4.frame.get_frame_info(body).get("content_size") or 0
        limit = LZ4_MAX_RATIO * len(body) if max_bytes is None else min(LZ4_MAX_RATIO * len(body), max_bytes)
        if claimed > limit or (max_bytes is not None and claimed == 0):  # nimbus always stores the size
            raise CodecError(f"compressed frame of {len(body)} bytes claims {claimed or 'an unknown number of'} "
                             f"bytes; the limit is {limit}")
        return memoryview(lz4.frame.decompress(body))
    except (RuntimeError, MemoryError) as exc:
        raise CodecError(f"compressed frame is corrupt or truncated: {exc}") from exc
