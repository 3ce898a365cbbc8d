"""Channel bodies and header frames: where a body lives (inline, fresh segment, pool slot) and how it
is announced and opened. The Outbox and Inbox (data/channel.py) and the runtime use these.

Three placements, chosen by the sender:

* **inline**: bodies under ``inline_max_bytes`` ride inside the header frame on the socket;
* **slot**: written once into a free slot of the sender's pre-touched ``SlotPool`` (data/slots.py);
  the header names (pool, slot, reader); the receiver decodes views of the slot, which is released
  when the last view dies — no segment is created or unlinked per message;
* **segment**: a fresh segment per body (``prepare_body``), unlinked by the receiver on arrival —
  the runtime's requests and results, and bodies larger than a slot.

A header may only name segments and pools under its source's ``segment_prefix`` (a peer cannot make
the receiver unlink or map someone else's), and nothing in a frame is ever unpickled (P11).
"""

from __future__ import annotations

import itertools
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nimbus.data.codec import (
    DEFAULT_COMPRESS_MIN_BYTES,
    MAGIC,
    PREFIX,
    VERSION,
    Message,
    compress,
    decode,
    encode,
    encode_into,
    encoded_size,
    worth_compressing,
)
from nimbus.data.shm import Segment, unlink
from nimbus.data.slots import PoolReader, read_message
from nimbus.errors import CodecError

SEGMENT_KIND = "chan"
DEFAULT_INLINE_MAX_BYTES = 64 << 10
_META = "nimbus_channel"
_names = itertools.count()  # next() on a count is atomic under the GIL
FLAG_SLOT_HEADER = 0x80  # a codec-prefixed frame that announces a pool slot (no safetensors body)
_SLOT = struct.Struct("<IHBxQH")  # slot, reader, compressed, nbytes, len(pool name); then the name, then the tag JSON
_FLAGS_AT = len(MAGIC) + 1  # the flags byte of the codec prefix
_SLOT_PREFIX = PREFIX.pack(MAGIC, VERSION, FLAG_SLOT_HEADER, 0)


def body_segment_prefix(*, prefix: str, pid: int) -> str:
    """Prefix of every body segment (and slot pool) that process ``pid`` creates under run prefix ``prefix``."""
    return f"{prefix}{SEGMENT_KIND}_{pid}_"


def new_segment_name(*, prefix: str) -> str:
    """A fresh name under this process's body prefix (bodies and slot pools)."""
    return f"{body_segment_prefix(prefix=prefix, pid=os.getpid())}{next(_names)}"


@dataclass(frozen=True)
class Body:
    """A body made ready to announce: inline (small) or written into the segment ``segment``."""

    inline: Message | None
    segment: str | None
    nbytes: int
    compressed: bool


@dataclass(frozen=True)
class Envelope:
    """What an Inbox delivers: who sent it, the sender's tag, and the body (now in local memory).

    ``slot`` is set when the arrays are views of a sender's pool slot: the slot is released when
    the last of them is garbage (keep them only as long as needed; copy what must outlive that).
    """

    source: str
    tag: dict[str, Any]
    message: Message
    nbytes: int
    via_segment: bool
    compressed: bool
    slot: int | None = None


def _write_segment(*, prefix: str, size: int, fill: Callable[[memoryview], Any]) -> str:
    """Create a segment of ``size`` bytes, let ``fill`` write it, unmap it; unlinked again if fill fails."""
    segment = Segment.create(name=new_segment_name(prefix=prefix), size_bytes=size)
    try:
        fill(segment.buffer)
    except BaseException:
        segment.unlink()
        raise
    finally:
        segment.close()
    return segment.name


def prepare_body(*, message: Message, prefix: str,
                 inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES,
                 compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES) -> Body:
    """Place a body: inline if small, else in a new segment (LZ4-compressed when that makes it smaller)."""
    size = encoded_size(message)
    if size < inline_max_bytes:
        return Body(inline=message, segment=None, nbytes=size, compressed=False)
    if compress_min_bytes is None or size < compress_min_bytes:  # one copy: encode straight into the segment
        name = _write_segment(prefix=prefix, size=size, fill=lambda out: encode_into(message, out))
        return Body(inline=None, segment=name, nbytes=size, compressed=False)
    frame = bytearray(size)
    encode_into(message, memoryview(frame))
    packed = compress(frame) if worth_compressing(frame) else None
    data = packed if packed is not None and len(packed) < size else frame

    def copy(out: memoryview) -> None:
        out[:] = data

    name = _write_segment(prefix=prefix, size=len(data), fill=copy)
    return Body(inline=None, segment=name, nbytes=len(data), compressed=data is packed)


def discard_body(*, body: Body) -> None:
    """Remove a prepared body's segment (a body that will never be announced, or no longer needed)."""
    if body.segment is not None:
        unlink(name=body.segment)


def header_frame(*, tag: dict[str, Any], body: Body) -> bytes:
    """The small frame that announces ``body`` (and carries it when inline)."""
    meta = {"tag": tag, "segment": body.segment, "nbytes": body.nbytes, "compressed": body.compressed}
    if body.inline is None:
        return encode(Message(header={_META: meta}), compress_min_bytes=None)
    return encode(Message(header={_META: meta, "body": body.inline.header}, arrays=body.inline.arrays),
                  compress_min_bytes=None)


def slot_header_frame(*, tag: dict[str, Any], pool: str, slot: int, reader: int, nbytes: int,
                      compressed: bool) -> bytes:
    """The frame that announces a body written into ``slot`` of pool ``pool`` for reader ``reader``.

    The hot path of the Channel, so a fixed binary layout (codec prefix with ``FLAG_SLOT_HEADER``,
    then ``_SLOT``, the pool name and the tag as JSON) instead of a safetensors header: one
    ``json.dumps`` of the tag to write, one ``json.loads`` to read."""
    name = pool.encode()
    return b"".join((_SLOT_PREFIX, _SLOT.pack(slot, reader, bool(compressed), nbytes, len(name)), name,
                     json.dumps(tag, separators=(",", ":")).encode()))


def _parse_slot_header(frame: bytes | bytearray) -> dict[str, Any]:
    try:
        slot, reader, compressed, nbytes, name_len = _SLOT.unpack_from(frame, PREFIX.size)
        start = PREFIX.size + _SLOT.size
        pool = bytes(frame[start:start + name_len]).decode()
        tag = json.loads(bytes(frame[start + name_len:]))
    except (struct.error, ValueError, RecursionError) as exc:
        raise CodecError(f"malformed slot header: {exc}") from exc
    if not isinstance(tag, dict) or len(pool) != name_len:
        raise CodecError("malformed slot header: the tag is not a JSON object or the pool name is cut short")
    return {"tag": tag, "pool": pool, "slot": slot, "reader": reader, "nbytes": nbytes, "compressed": bool(compressed)}


def _read_segment(*, name: str, unlink_segment: bool, compressed: bool) -> Message:
    segment = Segment.attach(name=name)
    if unlink_segment:
        segment.unlink()  # the mapping stays valid; the name is gone, so nothing can leak it
    message = decode(segment.buffer, copy=False)
    if compressed:
        segment.close()  # decompressed into private memory: the mapping is no longer needed
    return message  # otherwise the arrays are views that keep the mapping alive until they die


def _count(*, meta: dict[str, Any], key: str) -> int:
    """A non-negative JSON integer field of a channel header (not a bool, float or string)."""
    value = meta.get(key)
    if type(value) is not int or value < 0:
        raise CodecError(f"channel header field {key!r} is {value!r}, not a non-negative integer")
    return value


def _check_name(*, name: Any, source: str, allowed_prefix: str | None) -> str:
    if not isinstance(name, str) or (allowed_prefix is not None and not name.startswith(allowed_prefix)):
        raise CodecError(f"source {source!r} named segment {name!r} outside its prefix {allowed_prefix!r}")
    return name


def _open_slot(*, meta: dict[str, Any], source: str, allowed_prefix: str | None,
               pools: dict[str, PoolReader] | None, max_decompressed_bytes: int | None) -> Envelope:
    if pools is None:
        raise CodecError(f"source {source!r} announced a pool slot to a receiver that takes none")
    name = _check_name(name=meta["pool"], source=source, allowed_prefix=allowed_prefix)
    slot, reader, nbytes = (_count(meta=meta, key=key) for key in ("slot", "reader", "nbytes"))
    if name not in pools:
        pools[name] = PoolReader.attach(name=name)
    compressed = bool(meta.get("compressed"))
    message = read_message(reader=pools[name], slot=slot, reader_index=reader, nbytes=nbytes, compressed=compressed,
                           max_decompressed_bytes=max_decompressed_bytes)
    return Envelope(source=source, tag=meta["tag"], message=message, nbytes=nbytes,
                    via_segment=True, compressed=compressed, slot=None if compressed else slot)


def open_frame(*, frame: bytes | bytearray, source: str, unlink_segment: bool,
               allowed_prefix: str | None = None, pools: dict[str, PoolReader] | None = None,
               max_decompressed_bytes: int | None = None) -> Envelope:
    """Decode a header frame and pull its body into local memory. Raises CodecError on a bad frame.

    ``pools``: the receiver's cache of attached slot pools of this source (None: slots refused).
    """
    if len(frame) > PREFIX.size and frame[_FLAGS_AT] == FLAG_SLOT_HEADER:
        return _open_slot(meta=_parse_slot_header(frame), source=source, allowed_prefix=allowed_prefix, pools=pools,
                          max_decompressed_bytes=max_decompressed_bytes)
    outer = decode(frame)
    meta = outer.header.get(_META)
    if not isinstance(meta, dict) or not isinstance(meta.get("tag"), dict):
        raise CodecError("frame is a codec frame but not a channel header")
    if "pool" in meta:
        return _open_slot(meta=meta, source=source, allowed_prefix=allowed_prefix, pools=pools,
                          max_decompressed_bytes=max_decompressed_bytes)
    name, nbytes = meta.get("segment"), _count(meta=meta, key="nbytes")
    if name is None:
        body = outer.header.get("body", {})
        if not isinstance(body, dict):
            raise CodecError(f"channel header's inline body header is a {type(body).__name__}, not an object")
        return Envelope(source=source, tag=meta["tag"], message=Message(header=body, arrays=outer.arrays),
                        nbytes=nbytes, via_segment=False, compressed=False)
    name = _check_name(name=name, source=source, allowed_prefix=allowed_prefix)
    compressed = bool(meta.get("compressed"))
    message = _read_segment(name=name, unlink_segment=unlink_segment, compressed=compressed)
    return Envelope(source=source, tag=meta["tag"], message=message, nbytes=nbytes,
                    via_segment=True, compressed=compressed)
