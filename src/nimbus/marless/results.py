"""What MARLess's learner results share (data/result.py's ``WireResult`` for each of its functions): loss statistics
named by the algorithm, and the one rule for which of a result's numbers the round's metrics row reports.

* ``stats``: a learner's loss statistics are named by its algorithm (``POLICY_STATS`` for IPPO and MAPPO,
  ``VALUE_STATS`` for IQL, VDN and QMIX), so a result holds them as one ``stats`` field, the names in the class's
  ``STATS``, rather than as a field per name the algorithm owns. On the wire they stay flat header keys in that
  field's place, where they have always been: the simulated runtime, the tests and a driver of the previous version
  read them there. ``from_message`` gathers exactly the ``STATS`` keys and names a missing one, as a missing field.
* ``row_stats()``: the result's numbers as the metrics row's ``losses/<policy>/<name>``: every number it carries
  (fields and statistics, in header order), the bookkeeping left out: versions, the row count, flags, names and
  nested tables. One rule for every learner result, so a new field that is a measurement reaches the row without
  a reader to change.

Example::

    @dataclass(frozen=True)
    class FitResult(MarlessResult):
        STATS: ClassVar[tuple[str, ...]] = ("loss", "q_mean")
        policy_version: int
        stats: dict[str, float]
        fit_s: float

    message = FitResult(policy_version=3, stats={"loss": 0.5, "q_mean": 1.0}, fit_s=0.2).wire_message()
    # header {"policy_version": 3, "loss": 0.5, "q_mean": 1.0, "fit_s": 0.2}
    FitResult.from_message(message).row_stats()   # {"loss": 0.5, "q_mean": 1.0, "fit_s": 0.2}
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import numpy as np

from nimbus.data.codec import Message
from nimbus.data.result import ResultError, WireResult

STATS_FIELD = "stats"
R = TypeVar("R", bound="MarlessResult")


class MarlessResult(WireResult):
    """Mixin for a MARLess learner result dataclass (module docstring): ``stats`` flat on the wire, ``row_stats``."""

    STATS: ClassVar[tuple[str, ...]] = ()   # the loss statistics the ``stats`` field holds; () without one

    def wire_header(self) -> dict[str, Any]:
        """The fields as the header carries them: the ``stats`` field's statistics flat in its place."""
        header: dict[str, Any] = {}
        for name, value in vars(self).items():
            if name == STATS_FIELD and self.STATS:
                header.update(value)
            else:
                header[name] = value
        return header

    def wire_message(self, *, arrays: dict[str, np.ndarray] | None = None,
                     extra_header: dict[str, Any] | None = None) -> Message:
        return Message(header={**self.wire_header(), **(extra_header or {})}, arrays=arrays or {})

    @classmethod
    def from_message(cls: type[R], message: Message) -> R:
        if not cls.STATS:
            return super().from_message(message)
        header = message.header
        missing = [name for name in cls.STATS if name not in header]
        if missing:
            raise ResultError(f"{cls.__name__}: the function's result lacks the statistics {', '.join(missing)} "
                              f"(it has {', '.join(sorted(header))})")
        gathered = Message(header={**header, STATS_FIELD: {name: header[name] for name in cls.STATS}},
                           arrays=message.arrays)
        return super().from_message(gathered)

    def row_stats(self) -> dict[str, float]:
        """The numbers the round's metrics row reports for this result (module docstring), as floats."""
        return {name: float(value) for name, value in self.wire_header().items() if is_row_stat(name=name, value=value)}


def is_row_stat(*, name: str, value: Any) -> bool:
    """A measurement, not bookkeeping: a number (a flag is no number here) other than a version or the row count."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not name.endswith("_version") \
        and name != "rows"
