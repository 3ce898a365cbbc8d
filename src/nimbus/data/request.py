"""A function request as a codec ``Message``: a frozen dataclass whose fields travel as one header entry.

Every request a driver sends a function (the actor's, the learner's, Stellaris's gradient and parameter
requests, the MARLess ones) is a frozen dataclass of JSON-able fields. ``WireRequest`` writes those fields,
shallow, under the class's ``HEADER`` key, followed by ``"_affinity"`` (the runtime routes a request to the
idle worker that last served the same key, runtime/attempts.py), and reads them back on the other side.
Nothing is pickled: the frame is the codec's JSON header plus the arrays a request passes along.

Example::

    @dataclass(frozen=True)
    class EchoRequest(WireRequest, header="echo", affinity="echo-{rank}"):   # affinity: str.format over the fields
        rank: int

    message = EchoRequest(rank=3).to_message()    # header {"echo": {"rank": 3}, "_affinity": "echo-3"}
    assert EchoRequest.from_message(message) == EchoRequest(rank=3)
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import numpy as np

from nimbus.data.codec import Message

AFFINITY_KEY = "_affinity"  # the header key the runtime routes by (runtime/attempts.py imports it from here)

R = TypeVar("R", bound="WireRequest")


class WireRequest:
    """Mixin for a request dataclass: ``to_message``/``from_message`` through its header key.

    A subclass names its header key and its affinity in the class line, ``class LearnerRequest(WireRequest,
    header="learner", affinity="learner-{policy}")``; the affinity is a ``str.format`` template over the fields
    (``"parameter-{model[policy]}"`` reads a dict field). A subclass of a request keeps both. A request that sends
    arrays or more header entries defines its own ``to_message`` and builds the message with ``wire_message``."""

    HEADER: ClassVar[str]
    AFFINITY: ClassVar[str]

    def __init_subclass__(cls, *, header: str | None = None, affinity: str | None = None) -> None:
        super().__init_subclass__()
        if header is not None:
            cls.HEADER = header
        if affinity is not None:
            cls.AFFINITY = affinity

    def wire_message(self, *, arrays: dict[str, np.ndarray] | None = None,
                     extra_header: dict[str, Any] | None = None) -> Message:
        """``{HEADER: fields, "_affinity": ...}`` followed by ``extra_header``, with ``arrays``."""
        # a shallow dict (not asdict's deep copy, ~0.1 ms): the header is serialised before it leaves the process
        fields = dict(vars(self))
        header = {self.HEADER: fields, AFFINITY_KEY: self.AFFINITY.format(**fields), **(extra_header or {})}
        return Message(header=header, arrays=arrays or {})

    def to_message(self) -> Message:
        return self.wire_message()

    @classmethod
    def from_message(cls: type[R], message: Message) -> R:
        return cls(**message.header[cls.HEADER])
