"""Channel header frames (data/frames.py ``open_frame``): a malformed header raises CodecError, never a KeyError,
TypeError or ValueError from inside the parser (a receiver drops the source on CodecError)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from nimbus.data.codec import Message, encode
from nimbus.data.frames import open_frame, slot_header_frame
from nimbus.errors import CodecError

PREFIX = "nimbus_h1_absent_"   # no segment or pool of this prefix exists: a well-formed name is FileNotFoundError


def _open(frame: bytes) -> None:
    try:
        envelope = open_frame(frame=frame, source="peer", unlink_segment=False, allowed_prefix=PREFIX, pools={})
    except (CodecError, FileNotFoundError):   # FileNotFoundError: a named body already gone (the Inbox logs it)
        return
    assert isinstance(envelope.tag, dict) and isinstance(envelope.message.header, dict)
    assert type(envelope.nbytes) is int and envelope.nbytes >= 0


def _channel(meta: object, body: object = None) -> bytes:
    header = {"nimbus_channel": meta} if body is None else {"nimbus_channel": meta, "body": body}
    return encode(Message(header=header), compress_min_bytes=None)


@pytest.mark.parametrize("meta,body", [({"tag": {}}, None), ({"tag": {}, "segment": None}, None),
                                       ({"tag": {}, "segment": None, "nbytes": "x"}, None),
                                       ({"tag": {}, "segment": None, "nbytes": None}, None),
                                       ({"tag": {}, "segment": None, "nbytes": -1}, None),
                                       ({"tag": {}, "segment": None, "nbytes": 1}, [1]),
                                       ({"tag": {}, "pool": PREFIX + "p", "slot": "0", "reader": 0, "nbytes": 1}, None),
                                       ({"tag": {}, "pool": PREFIX + "p", "reader": 0, "nbytes": 1}, None)])
def test_a_channel_header_with_a_missing_or_mistyped_field_is_a_codec_error(meta: dict, body: object) -> None:
    """Regression: a missing ``nbytes`` raised KeyError, ``"x"`` ValueError, a list body became the header."""
    with pytest.raises(CodecError):
        open_frame(frame=_channel(meta, body), source="peer", unlink_segment=False, allowed_prefix=PREFIX, pools={})


values = st.none() | st.booleans() | st.integers(-2, 1 << 65) | st.floats() | st.text(max_size=4) \
    | st.just(PREFIX + "x") | st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(max_size=2), st.integers(),
                                                                                     max_size=2)
counts = st.none() | st.integers(-2, 1 << 65) | st.floats() | st.text(max_size=2) | st.booleans()
metas = st.fixed_dictionaries(   # a tag (or the frame is refused at once), then any mix of the other fields
    {"tag": st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)},
    optional={"segment": st.none() | values, "nbytes": counts, "compressed": values, "pool": values,
              "slot": counts, "reader": counts})


@settings(max_examples=400, deadline=None)
@given(meta=metas | values, body=st.none() | values)
def test_only_codec_error_escapes_open_frame_of_any_channel_header(meta: object, body: object) -> None:
    _open(_channel(meta, body))


@settings(max_examples=300, deadline=None)
@given(tag=st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), slot=st.integers(0, 1 << 32 - 1),
       nbytes=st.integers(0, 1 << 40), cut=st.integers(0, 64), flip=st.integers(0, 8 * 40 - 1))
def test_only_codec_error_escapes_open_frame_of_a_mutated_slot_header(tag: dict, slot: int, nbytes: int, cut: int,
                                                                      flip: int) -> None:
    frame = bytearray(slot_header_frame(tag=tag, pool=PREFIX + "pool", slot=slot, reader=0, nbytes=nbytes,
                                        compressed=False))
    if flip // 8 < len(frame) and flip // 8 >= 8:   # keep the codec prefix: it routes the frame to this parser
        frame[flip // 8] ^= 1 << (flip % 8)
    _open(bytes(frame[:len(frame) - cut]))
