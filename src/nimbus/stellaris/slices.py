"""The filling buffer of a round (Stellaris §IV step ②, §V-B): actor rows become learner slices as they arrive.

As each actor's rows reach the driver they are post-processed once (PPO: GAE, on that actor's rows alone, which
is exact: every env fragment ends in a ``cut`` row, so no advantage reaches across actors; IMPACT: nothing, its
time-major layout is the learner's), shuffled in whole units (PPO: rows; IMPACT: env columns of
``rollout_length`` rows, which V-trace needs in order) and appended to the round's filling buffer. Every
``slice_rows`` rows make a **slice**, put in the Store under its own key and learned at once: each of the
algorithm's passes over it (PPO: ``algo.num_epochs``; IMPACT: ``algo.circular_buffer_replays``) is one learner
function that reads only that key. When the round's last actor has delivered, the rows left (fewer than
``slice_rows``) make the round's last, shorter slice, as PPO's own minibatch split does: no row is dropped or
carried into another round.

Example::

    cutter = SliceCutter(slice_rows=128, unit_rows=1)
    full = cutter.add(rows=actor_rows, generator=generator)   # 256 rows → 2 slices of 128
    last = cutter.rest()                                       # None: nothing left
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from nimbus.algos.base import Algorithm


@dataclass(frozen=True)
class Slice:
    """One slice of a round's batch: its Store key, its rows and the learner task positions over them."""

    key: str
    index: int
    rows: int
    positions: np.ndarray   # the task (PPO: every row of the slice; IMPACT: every env column)


class SliceCutter:
    """Rows in, full slices of ``slice_rows`` out (in arrival order); ``rest`` the remainder once the round ends."""

    def __init__(self, *, slice_rows: int, unit_rows: int) -> None:
        if slice_rows < 1 or unit_rows < 1 or slice_rows % unit_rows:
            raise ValueError(f"slice_rows ({slice_rows}) must be a positive multiple of {unit_rows} rows")
        self.slice_rows, self.unit_rows = slice_rows, unit_rows
        self._pending: dict[str, np.ndarray] = {}

    @property
    def pending_rows(self) -> int:
        return len(next(iter(self._pending.values()))) if self._pending else 0

    def add(self, *, rows: dict[str, np.ndarray], generator: torch.Generator) -> list[dict[str, np.ndarray]]:
        """Append ``rows`` (shuffled in whole units) and cut every full slice now held."""
        count = len(next(iter(rows.values())))
        units = count // self.unit_rows
        if units * self.unit_rows != count:
            raise ValueError(f"{count} rows are not whole units of {self.unit_rows}")
        order = torch.randperm(units, generator=generator).numpy()
        index = (order[:, None] * self.unit_rows + np.arange(self.unit_rows)).ravel()
        shuffled = {key: np.asarray(value)[index] for key, value in rows.items()}
        self._pending = shuffled if not self._pending else \
            {key: np.concatenate([self._pending[key], shuffled[key]]) for key in shuffled}
        full = []
        while self.pending_rows >= self.slice_rows:
            full.append({key: value[:self.slice_rows] for key, value in self._pending.items()})
            self._pending = {key: value[self.slice_rows:] for key, value in self._pending.items()}
        return full

    def rest(self) -> dict[str, np.ndarray] | None:
        """The rows that did not fill a slice (the round's last slice), or None; the cutter is empty after."""
        rest, self._pending = (self._pending if self.pending_rows else None), {}
        return rest


def postprocess_rows(*, algorithm: Algorithm, rows: dict[str, np.ndarray], needed: bool) -> dict[str, np.ndarray]:
    """One actor's rows post-processed once by the driver (PPO: + ``advantages``, ``returns``), as numpy."""
    if not needed:
        return rows
    tensors = {key: torch.as_tensor(np.asarray(value)) for key, value in rows.items()}
    done = algorithm.postprocess(batch=tensors)
    return {key: value.numpy() for key, value in done.items()}
