"""Checkpoint files that the safetensors library opens on its own (format version 2).

A checkpoint's ``weights.safetensors`` is a plain safetensors file: each tensor is named after the
model's ``state_dict`` key (``critic.0.weight``), observation-normaliser statistics and other extras are
named ``nimbus_extra/<name>``, and nimbus's JSON header sits in ``__metadata__["nimbus"]``
(``policy_version``, ``extras``: the extra names). ``optimizer.safetensors`` and ``actors.safetensors``
are plain files too, with their own tensor names. The wire keeps the codec's frames (an 8-byte
``NMBF`` prefix, LZ4 above 1 MiB); a file is written uncompressed, without the prefix.

Format version 1 (earlier nimbus) wrote the frames themselves; `read_message` still reads them.

Example (no nimbus needed to read one)::

    from safetensors.numpy import load_file
    tensors = load_file("runs/x/checkpoints/ckpt-000050/weights.safetensors")   # {"critic.0.weight": ...}
"""

from __future__ import annotations

from nimbus.data.codec import MAGIC, PREFIX, VERSION, Message, decode, encode

EXTRA_PREFIX = "nimbus_extra/"
_PARAM, _EXTRA = "param.", "extra."   # how models/weights.py names a weights Message's arrays


def write_bytes(*, message: Message, weights: bool) -> bytes:
    """A plain safetensors file of ``message`` (``weights``: renamed to state_dict keys, see the module doc)."""
    if weights:
        message = _to_state_dict_names(message=message)
    return encode(message, compress_min_bytes=None)[PREFIX.size:]


def read_message(*, data: bytes, weights: bool) -> Message:
    """The Message a file holds: a plain safetensors file (format 2) or a codec frame (format 1)."""
    if data[:len(MAGIC)] == MAGIC:
        return decode(data, copy=True)
    message = decode(PREFIX.pack(MAGIC, VERSION, 0, 0) + data, copy=True)
    return _from_state_dict_names(message=message) if weights else message


def _to_state_dict_names(*, message: Message) -> Message:
    arrays, extras = {}, []
    for name, array in message.arrays.items():
        if name.startswith(_PARAM):
            arrays[name[len(_PARAM):]] = array
        elif name.startswith(_EXTRA):
            extras.append(name[len(_EXTRA):])
            arrays[EXTRA_PREFIX + extras[-1]] = array
        else:
            raise ValueError(f"weights array {name!r} is neither a parameter nor an extra")
    return Message(header={**message.header, "extras": sorted(extras)}, arrays=arrays)


def _from_state_dict_names(*, message: Message) -> Message:
    header = dict(message.header)
    extras = {EXTRA_PREFIX + name for name in header.pop("extras", [])}
    arrays = {(_EXTRA + name[len(EXTRA_PREFIX):] if name in extras else _PARAM + name): array
              for name, array in message.arrays.items()}
    return Message(header=header, arrays=arrays)
