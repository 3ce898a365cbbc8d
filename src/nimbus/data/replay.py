"""Replay strategies: which buffer rows a learner reads next (ARTOS Table 1, DESIGN.md §2).

A strategy looks at a ``Buffer`` and returns row *positions* for the next learner batch
(``select``), then hears which of them were used (``consumed``). Strategies own their selection
state; the buffer owns the rows. FullBatch (PPO) is here; Uniform, Prioritized (sum tree), NStep
and FIFO follow the same Protocol in this module.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from nimbus.data.buffer import Buffer


class ReplayStrategy(Protocol):
    """Chooses the rows of the next learner batch.

    Example::

        strategy = FullBatch()
        indices = strategy.select(buffer=buffer)          # None: not ready yet
        if indices is not None:
            batch = buffer.read(indices=indices)
            ...                                           # learner update
            strategy.consumed(indices=indices)
    """

    def select(self, *, buffer: Buffer) -> np.ndarray | None: ...

    def consumed(self, *, indices: np.ndarray) -> None: ...


class FullBatch:
    """On-policy (PPO, TRPO): every row ingested since the last consume, once.

    Rows are ordered by (policy_version, actor_rank, ingest order) — ingest order only breaks ties
    between rows of one actor at one version, i.e. rows within an ingest and successive ingests of
    the same actor — so the batch does not depend on which actor finished first, and two runs with
    the same seed give identical batches. ``consumed`` drops every row selected by the last
    ``select`` (whatever ``indices`` it is given) and marks the given ones read. Rows overwritten
    before they were selected are lost (the buffer counts them: ``overwritten_unread_rows``).

    Example::

        strategy = FullBatch(min_rows=2048)
        indices = strategy.select(buffer=buffer)   # positions, or None if fewer than 2048 rows are new
    """

    def __init__(self, *, min_rows: int = 1) -> None:
        if min_rows < 1:
            raise ValueError(f"min_rows must be ≥ 1, got {min_rows}")
        self.min_rows = min_rows
        self._next_seq = 0  # rows with ingest_seq below this were consumed
        self._selected: tuple[Buffer, int] | None = None  # buffer and 1 + the last selected ingest_seq

    def select(self, *, buffer: Buffer) -> np.ndarray | None:
        positions = buffer.positions_since(seq=self._next_seq)
        if positions.size < self.min_rows:
            return None
        meta = buffer.read_meta(indices=positions)
        order = np.lexsort((meta["ingest_seq"], meta["actor_rank"], meta["policy_version"]))
        self._selected = (buffer, int(meta["ingest_seq"].max()) + 1)
        return positions[order]

    def consumed(self, *, indices: np.ndarray) -> None:
        if self._selected is None:
            raise ValueError("FullBatch.consumed called without a select before it")
        buffer, total = self._selected
        buffer.mark_read(indices=indices)
        self._next_seq = total
        self._selected = None

    @property
    def pending_from_seq(self) -> int:
        """The first ``ingest_seq`` not yet consumed (for checkpoints and tests)."""
        return self._next_seq
