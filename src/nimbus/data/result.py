"""A function's result as a codec ``Message``: a frozen dataclass whose fields are the header's keys.

The twin of data/request.py for the way back. Every function a workflow invokes (the actors, the learners,
Stellaris's gradient learner and parameter function) returns one of these, written with ``wire_message`` and read
back with ``from_message``, so the driver reads typed fields instead of ``header["…"]`` and a result that lacks a
field is named with the field. The keys stay flat in the header, as before these classes existed (the runtime adds
its own ``_invocation_id`` and ``_attempt`` beside them, runtime/attempts.py; ``invocation_id`` reads it), and the
fields a reader does not know (an env slot's state, envs/slot_state.py) stay in the header untouched.

Example::

    @dataclass(frozen=True)
    class EchoResult(WireResult):
        rank: int

    message = EchoResult(rank=3).wire_message()          # header {"rank": 3}
    assert EchoResult.from_message(message).rank == 3
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import numpy as np

from nimbus.data.codec import Message
from nimbus.errors import NimbusError

INVOCATION_ID_KEY = "_invocation_id"   # the runtime's: the accepted attempt's invocation (runtime/attempts.py)

T = TypeVar("T", bound="WireResult")


class ResultError(NimbusError):
    """A function's result lacks a field its reader needs (a function and its driver of different versions)."""


class WireResult:
    """Mixin for a result dataclass: its fields are the header's keys (module docstring)."""

    def wire_message(self, *, arrays: dict[str, np.ndarray] | None = None,
                     extra_header: dict[str, Any] | None = None) -> Message:
        """The fields (shallow), then ``extra_header``, with ``arrays``."""
        return Message(header={**vars(self), **(extra_header or {})}, arrays=arrays or {})

    @classmethod
    def from_message(cls: type[T], message: Message) -> T:
        header = message.header
        fields = dataclasses.fields(cls)   # type: ignore[arg-type]   # every subclass is a dataclass
        missing = [f.name for f in fields if f.name not in header and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ResultError(f"{cls.__name__}: the function's result lacks {', '.join(missing)} "
                              f"(it has {', '.join(sorted(header))})")
        return cls(**{f.name: header[f.name] for f in fields if f.name in header})


def invocation_id(message: Message) -> str | None:
    """The invocation the runtime accepted this result from (None: a result no runtime stamped)."""
    return message.header.get(INVOCATION_ID_KEY)
