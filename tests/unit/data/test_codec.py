"""The wire format: round-trips over dtypes and shapes, errors on bad frames, safetensors compatibility."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from nimbus.data.codec import FLAG_LZ4, MAGIC, PREFIX, VERSION, Message, decode, encode, encode_into, encoded_size
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


@pytest.mark.parametrize("extra", [1, 2, 8])
def test_a_header_length_beyond_the_frame_by_even_one_byte_is_refused(extra: int) -> None:
    """The length field is checked exactly: a frame that claims ``extra`` header bytes more than it holds is
    truncated, even when the missing bytes would only have been padding (the header still parses)."""
    frame = bytearray(encode(Message(header={"a": 1})))
    (length,) = struct.unpack_from("<Q", frame, PREFIX.size)
    struct.pack_into("<Q", frame, PREFIX.size, length + extra)
    with pytest.raises(CodecError, match="truncated inside its header"):
        decode(bytes(frame))
    struct.pack_into("<Q", frame, PREFIX.size, length)
    assert decode(bytes(frame)).header == {"a": 1}


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
    other = decode(encode(Message(header={"round": 2, "id": "a"},
                                  arrays={"x": np.arange(6, dtype=np.int64).reshape(2, 3)})))
    assert first.header == {"round": 1} and second.header == {"round": 2, "id": "a"}
    assert other.arrays["x"].dtype == np.int64 and other.arrays["x"].shape == (2, 3)
    second.header["round"] = 99  # a caller's edits never leak into the next decode
    again = decode(encode(Message(header={"round": 2, "id": "a"}, arrays={"x": np.ones(6, np.float32)})))
    assert again.header["round"] == 2


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


def _raw_frame(layout: bytes, data: bytes = b"", flags: int = 0) -> bytes:
    layout += b" " * (-len(layout) % 8)
    return PREFIX.pack(MAGIC, VERSION, flags, 0) + struct.pack("<Q", len(layout)) + layout + data


def test_an_empty_byte_range_cannot_claim_a_large_shape() -> None:
    """Regression: a 128-byte frame whose entry has an empty range decoded into a 4 GiB zero array."""
    frame = _raw_frame(b'{"x":{"dtype":"F32","shape":[1073741824],"data_offsets":[0,0]}}')
    assert len(frame) <= 128
    with pytest.raises(CodecError, match="does not match"):
        decode(frame)


@pytest.mark.parametrize("shape", ["[-1,0]", "[0,-5]", "[0,1,2", "[" + ",".join(["1"] * 65) + "]",
                                   "[1.5]", '["2"]', "[true]"])
def test_shapes_are_bounded_before_anything_is_allocated(shape: str) -> None:
    frame = _raw_frame(b'{"x":{"dtype":"U8","shape":' + shape.encode() + b',"data_offsets":[0,0]}}')
    with pytest.raises(CodecError):
        decode(frame)


@pytest.mark.parametrize("dtype", ["X", "F8", "BF16", "f32", "C64", ""])
def test_an_unknown_dtype_is_refused_not_read_as_bytes(dtype: str) -> None:
    layout = json.dumps({"x": {"dtype": dtype, "shape": [4], "data_offsets": [0, 4]}}).encode()
    with pytest.raises(CodecError, match="unknown dtype"):
        decode(_raw_frame(layout, b"\0" * 8))


def test_a_byte_range_larger_than_its_shape_is_refused() -> None:
    """Exact: 16 bytes for a float32 [3] is a lie in the layout, refused (not 12 of them read, nor a reshape
    error)."""
    layout = json.dumps({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}).encode()
    with pytest.raises(CodecError, match="does not match"):
        decode(_raw_frame(layout, b"\0" * 16))


@pytest.mark.parametrize("entry", [{"shape": [True], "data_offsets": [0, 1]},
                                   {"shape": [1], "data_offsets": [False, True]},
                                   {"shape": [1], "data_offsets": [0, True]}])
def test_booleans_are_not_counts(entry: dict) -> None:
    """JSON true is not 1: a layout with booleans where integers belong is refused, even when they would add up."""
    layout = json.dumps({"x": {"dtype": "U8", **entry}}).encode()
    with pytest.raises(CodecError, match="not a list of non-negative integers"):
        decode(_raw_frame(layout, b"\0" * 8))


def test_overflowing_shapes_are_refused() -> None:
    """itemsize x prod(shape) is computed exactly: a product that wraps int64 to 8 is not 8 bytes."""
    frame = _raw_frame(b'{"x":{"dtype":"U8","shape":[4294967296,4294967296,8],"data_offsets":[0,8]}}', b"\0" * 8)
    with pytest.raises(CodecError, match="does not match"):
        decode(frame)


@pytest.mark.parametrize("shape", [[0, 2 ** 70], [2 ** 62, 2 ** 62, 0], [2 ** 63, 0], [0, 2 ** 63 - 1, 2]])
def test_empty_shapes_numpy_cannot_make_are_refused(shape: list[int]) -> None:
    """Regression: prod(shape) == 0 matched the empty byte range, then numpy raised ValueError."""
    layout = json.dumps({"x": {"dtype": "U8", "shape": shape, "data_offsets": [0, 0]}}).encode()
    with pytest.raises(CodecError, match="larger than numpy can represent"):
        decode(_raw_frame(layout))


def test_the_largest_empty_shape_numpy_can_make_is_accepted() -> None:
    layout = json.dumps({"x": {"dtype": "U8", "shape": [0, 2 ** 63 - 1], "data_offsets": [0, 0]}}).encode()
    assert decode(_raw_frame(layout)).arrays["x"].shape == (0, 2 ** 63 - 1)


@pytest.mark.parametrize("body", [b"", b"abc", b"1234567"])
def test_a_compressed_body_shorter_than_its_header_length_is_refused(body: bytes) -> None:
    """Regression: an LZ4 body under 8 bytes raised struct.error."""
    import lz4.frame
    with pytest.raises(CodecError, match="too short"):
        decode(PREFIX.pack(MAGIC, VERSION, FLAG_LZ4, 0) + lz4.frame.compress(body))


DEEP = 100_000


@pytest.mark.parametrize("layout", [
    b'{"__metadata__":{"nimbus":' + b"[" * DEEP + b"]" * DEEP + b"}}",                    # the metadata value itself
    b'{"__metadata__":{"nimbus":' + json.dumps("[" * DEEP + "]" * DEEP).encode() + b"}}",  # the header it carries
    b'{"x":' + b"[" * DEEP + b"]" * DEEP + b"}",                                           # an array's entry
    b'{"__metadata__":' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"}"])
def test_deeply_nested_json_is_refused(layout: bytes) -> None:
    """Regression: RecursionError escaped the metadata fast path and the header's json.loads."""
    with pytest.raises(CodecError, match="not valid JSON"):
        decode(_raw_frame(layout))


@pytest.mark.parametrize("meta", ["[1,2]", "3", '"s"', "null", "true"])
def test_a_header_that_is_not_a_json_object_is_refused(meta: str) -> None:
    """Regression: metadata "[1,2]" was accepted as a list header."""
    layout = json.dumps({"__metadata__": {"nimbus": meta}}).encode()
    with pytest.raises(CodecError, match="not an object"):
        decode(_raw_frame(layout))


def _mutate(frame: bytes, data: st.DataObject) -> bytes:
    out = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 8), label="mutations")):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "digit"]), label="kind")
        at = data.draw(st.integers(0, max(len(out) - 1, 0)), label="at")
        if kind == "flip" and out:
            out[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "insert":
            out[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del out[at:at + data.draw(st.integers(1, 4))]
        elif kind == "digit" and out:
            out[at] = ord(data.draw(st.sampled_from("0123456789-,[]")))
    return bytes(out)


def _decode_or_codec_error(frame: bytes) -> None:
    for copy in (False, True):
        for as_array in (False, True):
            try:
                decode(np.frombuffer(frame, np.uint8).copy() if as_array else frame, copy=copy,
                       max_decompressed_bytes=1 << 20)
            except CodecError:
                pass  # the only exception decode may raise


@settings(max_examples=300, deadline=None)
@given(message=messages, compress=st.booleans(), data=st.data())
def test_only_codec_error_escapes_decode_of_a_mutated_frame(message: Message, compress: bool,
                                                            data: st.DataObject) -> None:
    _decode_or_codec_error(_mutate(encode(message, compress_min_bytes=0 if compress else None), data))


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=256), flags=st.sampled_from([0, 1]), header_len=st.integers(0, 1 << 64 - 1) | st.none())
def test_only_codec_error_escapes_decode_of_random_bytes(body: bytes, flags: int, header_len: int | None) -> None:
    length = struct.pack("<Q", header_len) if header_len is not None else b""
    _decode_or_codec_error(PREFIX.pack(MAGIC, VERSION, flags, 0) + length + body)


@settings(max_examples=300, deadline=None)
@given(entries=st.dictionaries(
    st.text(max_size=4),
    st.fixed_dictionaries({"dtype": st.sampled_from(["F32", "U8", "BOOL", "F64", "X"]),
                           "shape": st.lists(st.integers(-3, 1 << 40) | st.integers(0, 4)
                                             | st.sampled_from([2 ** 62, 2 ** 63, 2 ** 64, 2 ** 70]), max_size=5),
                           "data_offsets": st.lists(st.integers(-8, 1 << 33) | st.integers(0, 64), min_size=2,
                                                    max_size=2)}), max_size=3),
    data=st.binary(max_size=64))
def test_only_codec_error_escapes_decode_of_a_crafted_layout(entries: dict, data: bytes) -> None:
    _decode_or_codec_error(_raw_frame(json.dumps(entries).encode(), data))


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                        max_size=3), max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(meta=json_values, depth=st.sampled_from([0, 1, 5, 3000]), as_string=st.booleans(), flags=st.sampled_from([0, 1]))
def test_only_codec_error_escapes_decode_of_any_metadata(meta: object, depth: int, as_string: bool, flags: int) -> None:
    """Whatever JSON the metadata holds (any type, nested deeper than the parser's stack), decode gives a dict
    header or CodecError."""
    text = "[" * depth + json.dumps(meta) + "]" * depth
    layout = b'{"__metadata__":{"nimbus":' + (json.dumps(text) if as_string else text).encode() + b"}}"
    frame = _raw_frame(layout)
    if flags:
        from nimbus.data.codec import compress
        frame = compress(frame)
    try:
        assert isinstance(decode(frame).header, dict)
    except CodecError:
        pass


def test_a_compressed_frame_claiming_more_than_lz4_can_expand_is_refused_unbounded() -> None:
    """Without max_decompressed_bytes too: LZ4 cannot expand more than ~255:1, so a 40-byte body that
    claims 1 TiB is refused before anything is allocated."""
    import lz4.frame
    compressor = lz4.frame.LZ4FrameCompressor(content_checksum=False)
    body = compressor.begin(source_size=1 << 40) + compressor.compress(b"\0" * 64)  # no end mark: a lie
    assert lz4.frame.get_frame_info(body)["content_size"] == 1 << 40
    with pytest.raises(CodecError, match="claims 1099511627776 bytes"):
        decode(PREFIX.pack(MAGIC, VERSION, 1, 0) + body)
