"""Whole-fragment replay (ARTOS Table 3, n=1, size=step): FIFO for IMPALA and IMPACT's Circular buffer.

Both follow the ``ReplayStrategy`` Protocol of data/replay.py and sample ``ReplayBatch``es of whole actor
fragments, time-major once reshaped; they live apart from the row-sampling strategies (Uniform,
Prioritized, NStep) because their unit is a fragment, not a row.
"""

from __future__ import annotations

import numpy as np

from nimbus.data.buffer import Buffer
from nimbus.data.replay import ReplayBatch, SampledReplay


class FIFO(SampledReplay):
    """IMPALA: whole actor fragments, oldest first, each exactly once (ARTOS Table 3: n=1, size=step).

    Every ingest is one fragment of ``fragment_rows`` rows (an actor's envs × rollout_length, env-major),
    so a batch of ``fragments_per_batch`` fragments reshapes to time-major [T, B]. Taking the oldest
    fragments in ingest order keeps each actor's fragments in the order it produced them. Fragments
    overwritten before they were taken are skipped and counted (``lost_fragments``).

    Example::

        strategy = FIFO(fragment_rows=4 * 50, fragments_per_batch=2)
        batch = strategy.sample(buffer=buffer)     # None until 2 untaken fragments are held
    """

    def __init__(self, *, fragment_rows: int, fragments_per_batch: int = 1) -> None:
        if fragment_rows < 1 or fragments_per_batch < 1:
            raise ValueError(f"FIFO needs fragment_rows ≥ 1 and fragments_per_batch ≥ 1, "
                             f"got {fragment_rows}, {fragments_per_batch}")
        self.fragment_rows, self.fragments_per_batch = fragment_rows, fragments_per_batch
        self.lost_fragments = 0
        self.taken_rows = 0          # rows handed to learners (lost fragments not included)
        self._next_seq = 0

    def pending_fragments(self, *, buffer: Buffer) -> int:
        """Whole untaken fragments still held."""
        oldest_held = buffer.total_rows_ingested - buffer.size_rows
        start = max(self._next_seq, -(-oldest_held // self.fragment_rows) * self.fragment_rows)
        return max(0, buffer.total_rows_ingested - start) // self.fragment_rows

    def sample(self, *, buffer: Buffer, rows: int | None = None) -> ReplayBatch | None:
        """The oldest ``fragments_per_batch`` whole fragments (``rows`` is ignored: batches are whole)."""
        oldest_held = buffer.total_rows_ingested - buffer.size_rows
        start = max(self._next_seq, -(-oldest_held // self.fragment_rows) * self.fragment_rows)
        need = self.fragments_per_batch * self.fragment_rows
        if buffer.total_rows_ingested - start < need:
            return None
        self.lost_fragments += (start - self._next_seq) // self.fragment_rows
        self._next_seq = start + need
        self.taken_rows += need
        self._buffer = buffer
        positions = (start + np.arange(need, dtype=np.int64)) % buffer.capacity_rows
        return ReplayBatch(indices=positions, seqs=start + np.arange(need, dtype=np.int64))

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"fifo": np.array([self._next_seq, self.lost_fragments, self.taken_rows], dtype=np.int64)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self._next_seq, self.lost_fragments, self.taken_rows = (int(v) for v in state["fifo"])


class Circular(SampledReplay):
    """IMPACT's circular buffer (Luo et al. 2020, §3): the last ``batches`` FIFO batches, each replayed
    ``replays`` (K) times.

    Each ``sample`` first fills free slots with new FIFO batches, then returns the slots' batches
    round-robin; a batch leaves after its K-th use. So fresh data keeps arriving while older batches
    are reused with a policy that has moved on: the clipped surrogate against the target network is
    what keeps those reuses safe. The rows stay in the ARTOS buffer (the driver holds positions and
    seqs); a row overwritten before a reuse is dropped by the learner like any stale row.

    Example::

        strategy = Circular(inner=FIFO(fragment_rows=160), batches=4, replays=2)
        batch = strategy.sample(buffer=buffer)     # a new or a held batch; None while nothing is held
    """

    def __init__(self, *, inner: FIFO, batches: int, replays: int) -> None:
        if batches < 1 or replays < 1:
            raise ValueError(f"Circular needs batches ≥ 1 and replays ≥ 1, got {batches}, {replays}")
        self.inner, self.batches, self.replays = inner, batches, replays
        self._slots: list[list] = []      # [ReplayBatch, uses so far]
        self._next = 0
        self.replayed_batches = 0         # uses after the first (for metrics and tests)

    @property
    def lost_fragments(self) -> int:
        return self.inner.lost_fragments

    @property
    def taken_rows(self) -> int:
        return self.inner.taken_rows

    def pending_fragments(self, *, buffer: Buffer) -> int:
        """Fragments a learner call could take now: new ones, or a held batch's worth while one is held."""
        held = self.inner.fragments_per_batch if self._slots else 0
        return self.inner.pending_fragments(buffer=buffer) + held

    def sample(self, *, buffer: Buffer, rows: int | None = None) -> ReplayBatch | None:
        while len(self._slots) < self.batches:
            fresh = self.inner.sample(buffer=buffer)
            if fresh is None:
                break
            self._slots.append([fresh, 0])
        if not self._slots:
            return None
        self._next %= len(self._slots)
        slot = self._slots[self._next]
        slot[1] += 1
        self.replayed_batches += slot[1] > 1
        if slot[1] >= self.replays:
            self._slots.pop(self._next)
        else:
            self._next += 1
        return slot[0]

    def consumed(self, *, indices: np.ndarray) -> None:
        self.inner.consumed(indices=indices)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The FIFO's position and the held batches (positions, seqs, uses) as flat arrays."""
        held = [slot[0] for slot in self._slots]
        return {**self.inner.state_dict(),
                "slot_uses": np.array([slot[1] for slot in self._slots] + [self._next], dtype=np.int64),
                "slot_rows": np.array([len(b.indices) for b in held], dtype=np.int64),
                "slot_indices": np.concatenate([b.indices for b in held] or [np.zeros(0, np.int64)]),
                "slot_seqs": np.concatenate([b.seqs for b in held] or [np.zeros(0, np.int64)])}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.inner.load_state_dict(state)
        bounds = np.concatenate([[0], np.cumsum(state["slot_rows"])]).astype(np.int64)
        *uses, self._next = (int(v) for v in state["slot_uses"])
        self._slots = [[ReplayBatch(indices=state["slot_indices"][a:b], seqs=state["slot_seqs"][a:b]), used]
                       for a, b, used in zip(bounds[:-1], bounds[1:], uses)]
