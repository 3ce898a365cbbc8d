"""The wire format: round-trips over dtypes and shapes, errors on bad frames, safetensors compatibility."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nimbus.data.codec import MAGIC, PREFIX, VERSION, Message, decode, encode, encode_into, encoded_size
from nimbus.errors import CodecError

DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8,
          np.uint64, np.uint32, np.uint16, np.uint8, np.bool_]

arrays = st.sampled_from(DTYPES).flatmap(
    lambda dtype: hnp.arrays(dtype=dtype, shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
messages = st.builds(
    lambda header, named: Message(header=header, arrays=named),
    st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8) | st.booleans(), max_size=3),
    st.dictionaries(st.text(alphabet="abcdefghij_/", min_size=1, max_size=8), arrays, max_size=4))


def assert_same(a: Message, b: Message) -> None:
    assert a.header == b.header
    assert sorted(a.arrays) == sorted(b.arrays)
    for name, array in a.arrays.items():
        got = b.arrays[name]
        assert got.dtype == array.dtype and got.shape == array.shape, name
        assert got.tobytes() == array.tobytes(), name  # bitwise: NaN payloads and -0.0 included


@settings(max_examples=60, deadline=None)
@given(message=messages, compress=st.booleans())
def test_round_trip(message: Message, compress: bool) -> None:
    frame = encode(message, compress_min_bytes=0 if compress else None)
    assert_same(message, decode(frame))
    assert_same(message, decode(frame, copy=True))


@settings(max_examples=30, deadline=None)
@given(message=messages)
def test_encode_into_writes_encoded_size_bytes(message: Message) -> None:
    out = bytearray(encoded_size(message) + 16)
    written = encode_into(message, memoryview(out))
    assert written == encoded_size(message)
    assert_same(message, decode(memoryview(out)[:written]))


@settings(max_examples=30, deadline=None)
@given(message=messages)
def test_body_is_a_safetensors_file(message: Message) -> None:
    frame = encode(message, compress_min_bytes=None)
    loaded = safetensors.numpy.load(frame[PREFIX.size:])
    assert sorted(loaded) == sorted(message.arrays)
    for name, array in message.arrays.items():
        assert loaded[name].dtype == array.dtype and loaded[name].tobytes() == array.tobytes()


def test_zero_size_and_bool_arrays() -> None:
    message = Message(header={"round": 3}, arrays={
        "empty": np.zeros((0, 3), np.float32), "flags": np.array([True, False, True])})
    got = decode(encode(message))
    assert got.header == {"round": 3} and got.arrays["empty"].shape == (0, 3)
    assert got.arrays["flags"].dtype == np.bool_ and got.arrays["flags"].tolist() == [True, False, True]


def test_big_endian_arrays_are_written_little_endian() -> None:
    got = decode(encode(Message(arrays={"be": np.arange(4, dtype=">f4")})))
    assert got.arrays["be"].dtype == np.dtype("<f4") and got.arrays["be"].tolist() == [0, 1, 2, 3]


def test_decode_returns_views_unless_copy() -> None:
    frame = bytearray(encode(Message(arrays={"x": np.arange(4, dtype=np.int64)})))
    view, copy = decode(frame).arrays["x"], decode(frame, copy=True).arrays["x"]
    frame[-8:] = (99).to_bytes(8, "little")
    assert view[-1] == 99 and copy[-1] == 3


def test_large_frames_are_compressed_by_default() -> None:
    message = Message(arrays={"x": np.zeros(1 << 19, np.float32)})  # 2 MiB of zeros
    frame = encode(message)
    assert len(frame) < encoded_size(message) // 10
    assert_same(message, decode(frame))


@settings(max_examples=40, deadline=None)
@given(message=messages, data=st.data())
def test_truncated_frame_raises_codec_error(message: Message, data: st.DataObject) -> None:
    frame = encode(message, compress_min_bytes=None)
    cut = data.draw(st.integers(min_value=0, max_value=len(frame) - 1))
    with pytest.raises(CodecError):
        decode(frame[:cut])


def test_truncated_compressed_frame_raises_codec_error() -> None:
    frame = encode(Message(arrays={"x": np.arange(1000.0)}), compress_min_bytes=0)
    with pytest.raises(CodecError):
        decode(frame[:len(frame) // 2])


def test_wrong_magic_or_version_raises_codec_error() -> None:
    frame = bytearray(encode(Message(arrays={"x": np.ones(2)})))
    with pytest.raises(CodecError, match="magic"):
        decode(b"XXXX" + bytes(frame[4:]))
    frame[4] = 99
    with pytest.raises(CodecError, match="version 99"):
        decode(bytes(frame))


def test_unsupported_dtype_raises_codec_error_naming_the_array() -> None:
    with pytest.raises(CodecError, match="'z'"):
        encode(Message(arrays={"z": np.zeros(2, np.complex64)}))


def test_output_buffer_too_small_raises() -> None:
    message = Message(arrays={"x": np.ones(8)})
    with pytest.raises(CodecError, match="smaller"):
        encode_into(message, memoryview(bytearray(encoded_size(message) - 1)))


def test_layouts_are_reused_across_headers_and_never_mixed_up() -> None:
    """The layout cache is keyed on the arrays' part of the header: a new header reuses it, different
    shapes or dtypes never do, and the header itself is always read from the frame at hand."""
    first = decode(encode(Message(header={"round": 1}, arrays={"x": np.arange(6, dtype=np.float32)})))
    second = decode(encode(Message(header={"round": 2, "id": "a"}, arrays={"x": np.arange(6, dtype=np.float32)})))
    other = decode(encode(Message(header={"round": 2, "id": "a"}, arrays={"x": np.arange(6, dtype=np.int64).reshape(2, 3)})))
    assert first.header == {"round": 1} and second.header == {"round": 2, "id": "a"}
    assert other.arrays["x"].dtype == np.int64 and other.arrays["x"].shape == (2, 3)
    second.header["round"] = 99  # a caller's edits never leak into the next decode
    assert decode(encode(Message(header={"round": 2, "id": "a"}, arrays={"x": np.ones(6, np.float32)}))).header["round"] == 2


def test_a_header_whose_rest_overrides_the_metadata_is_read_as_json_says() -> None:
    """A hand-made header with a second ``__metadata__`` key: JSON's last key wins, cached or not."""
    raw = b'{"__metadata__":{"nimbus":"{\\"a\\":1}"},"__metadata__":{"nimbus":"{\\"a\\":2}"}}'
    raw += b" " * (-len(raw) % 8)
    frame = PREFIX.pack(MAGIC, VERSION, 0, 0) + struct.pack("<Q", len(raw)) + raw
    assert decode(frame).header == {"a": 2} and decode(frame).header == {"a": 2}


def test_shape_that_does_not_match_its_bytes_raises_codec_error() -> None:
    frame = bytearray(encode(Message(arrays={"x": np.zeros(4, np.float32)})))
    patched = bytes(frame).replace(b'"shape":[4]', b'"shape":[5]')
    with pytest.raises(CodecError, match="does not match"):
        decode(patched)
