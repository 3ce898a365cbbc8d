"""Wire format: a dict of numpy arrays plus a small JSON header, as a safetensors frame.

Nothing that crosses a process boundary is pickled. A frame is::

    b"NMBF" | version u8 | flags u8 | reserved u16 | body

where body is a safetensors file (its ``__metadata__`` carries the JSON header under ``"nimbus"``),
LZ4-frame-compressed when the FLAG_LZ4 bit is set. Bodies are written by this module directly into a
caller's buffer (``encode_into``) so a sender copies each array exactly once, and decoded as numpy
views over the caller's buffer (``decode``), so a receiver copies nothing.

Example::

    frame = encode(Message(header={"round": 3}, arrays={"obs": np.zeros((4, 2), np.float32)}))
    msg = decode(frame)
    assert msg.header["round"] == 3 and msg.arrays["obs"].shape == (4, 2)
"""

from __future__ import annotations

import json
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


def _plan(message: Message) -> tuple[bytes, list[tuple[np.ndarray, int]], int]:
    """Safetensors header bytes, each array with its data offset, and the body size."""
    entries: dict[str, Any] = {"__metadata__": {"nimbus": json.dumps(message.header, separators=(",", ":"))}}
    layout: list[tuple[np.ndarray, int]] = []
    offset = 0
    for name in sorted(message.arrays):
        array = np.asarray(message.arrays[name])
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        if array.dtype not in _DTYPE_TO_ST:
            raise CodecError(f"array {name!r}: dtype {array.dtype} is not supported by the codec")
        entries[name] = {"dtype": _DTYPE_TO_ST[array.dtype], "shape": list(array.shape),
                         "data_offsets": [offset, offset + array.nbytes]}
        layout.append((array, offset))
        offset += array.nbytes
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # safetensors aligns the data section to 8 bytes
    return header, layout, 8 + len(header) + offset


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
    body = view[PREFIX.size:]
    if flags & FLAG_LZ4:
        body = _decompress(body, max_bytes=max_decompressed_bytes)
        copy, root = False, None  # already a private buffer
    (header_len,) = struct.unpack_from("<Q", body, 0)
    if 8 + header_len > len(body):
        raise CodecError("frame truncated inside its header")
    try:
        entries = json.loads(bytes(body[8:8 + header_len]))
        header = json.loads(entries.pop("__metadata__", {}).get("nimbus", "{}"))
    except (ValueError, AttributeError) as exc:
        raise CodecError(f"frame header is not valid JSON: {exc}") from exc
    data_start = 8 + header_len
    data = body[data_start:]
    arrays: dict[str, np.ndarray] = {}
    for name, entry in entries.items():
        begin, end = entry["data_offsets"]
        if end > len(data) or entry["dtype"] not in _ST_TO_DTYPE:
            raise CodecError(f"array {name!r} is truncated or of unknown dtype {entry['dtype']!r}")
        dtype = _ST_TO_DTYPE[entry["dtype"]]
        if end <= begin:
            array = np.zeros(entry["shape"], dtype=dtype)
        elif root is not None:
            start = PREFIX.size + data_start
            array = root[start + begin:start + end].view(dtype).reshape(entry["shape"])
        else:
            array = np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"])
        arrays[name] = array.copy() if copy else array
    return Message(header=header, arrays=arrays)


def _decompress(body: memoryview, *, max_bytes: int | None) -> memoryview:
    try:
        if max_bytes is not None:
            claimed = lz4.frame.get_frame_info(body).get("content_size") or 0
            if not 0 < claimed <= max_bytes:  # nimbus always stores the size; no size, no bound: refuse
                raise CodecError(f"compressed frame claims {claimed or 'an unknown number of'} bytes; "
                                 f"the limit is {max_bytes}")
        return memoryview(lz4.frame.decompress(body))
    except RuntimeError as exc:
        raise CodecError(f"compressed frame is corrupt or truncated: {exc}") from exc
