"""Replay strategies: which buffer rows a learner reads next (ARTOS Table 1).

A strategy looks at a ``Buffer`` and returns row *positions* for the next learner batch
(``select``), then hears which of them were used (``consumed``). Strategies own their selection
state; the buffer owns the rows. FullBatch (PPO), Uniform and Prioritized (sum tree) replay (DQN,
SAC), NStep (wraps either), and FIFO (IMPALA) and Circular (IMPACT) in data/fragment_replay.py all follow
this Protocol. The off-policy ones (``SampledReplay``) also ``sample`` a ``ReplayBatch`` (positions plus
per-row columns: PER weights, n-step targets), which the ``offpolicy`` workflow sends to its learner, and take
TD errors back (``update_priorities``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from nimbus.data.buffer import Buffer
from nimbus.data.sumtree import SumTree


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


# ----------------------------------------------------------------------------------- off-policy
@dataclass(frozen=True)
class ReplayBatch:
    """The rows of one off-policy learner call, as the driver chose them.

    ``seqs`` are the rows' ``ingest_seq`` when sampled: the learner drops rows whose position was
    overwritten since (their seq changed), and so does ``Prioritized.update_priorities``. N-step
    batches name, per row, the row whose ``next_obs`` ends the transition (``next_indices``) and add
    ``returns_n`` / ``discount_n``; PER adds ``weights``. Every column has one value per row.
    """

    indices: np.ndarray
    seqs: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    next_indices: np.ndarray | None = None
    next_seqs: np.ndarray | None = None


def _seqs(buffer: Buffer, positions: np.ndarray) -> np.ndarray:
    """The ingest sequence numbers of ``positions`` (a learner drops rows overwritten since the draw)."""
    return buffer.read_meta(indices=positions)["ingest_seq"]


class SampledReplay:
    """The off-policy strategies (Uniform, Prioritized, NStep here; FIFO and Circular in data/fragment_replay.py):
    each ``sample``s a ``ReplayBatch``, and ``select`` is that batch's positions.

    The defaults: ``consumed`` marks the rows read in the buffer last sampled; no priorities to update
    (``update_priorities`` returns 0 rows); nothing for a checkpoint to keep (``state_dict``,
    ``train.checkpoint_replay``) but the rows. A strategy overrides what it has.
    """

    _buffer: Buffer | None = None   # the buffer of the last sample

    def sample(self, *, buffer: Buffer, rows: int | None = None) -> ReplayBatch | None:
        raise NotImplementedError

    def select(self, *, buffer: Buffer) -> np.ndarray | None:
        batch = self.sample(buffer=buffer)
        return None if batch is None else batch.indices

    def consumed(self, *, indices: np.ndarray) -> None:
        if self._buffer is not None:
            self._buffer.mark_read(indices=indices)

    def update_priorities(self, *, buffer: Buffer, batch: ReplayBatch, td_errors: np.ndarray) -> int:
        """The rows whose priority was set from ``td_errors`` (none without priorities)."""
        return 0

    def state_dict(self) -> dict[str, np.ndarray]:
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        pass


class Uniform(SampledReplay):
    """Replay (DQN, SAC): ``batch_rows`` rows drawn uniformly, with replacement, from every row held.

    Not ready until ``min_rows`` rows are held (``learning_starts``). Rows are never consumed. With
    ``guard_rows`` (the rows actors may ingest while a learner reads: fragments in flight), the oldest
    rows that those ingests would overwrite are not drawn.

    Example::

        strategy = Uniform(batch_rows=64 * 128, min_rows=1000, seed=0)
        batch = strategy.sample(buffer=buffer)            # ReplayBatch, or None before 1000 rows
    """

    def __init__(self, *, batch_rows: int, min_rows: int = 1, seed: int = 0, guard_rows: int = 0) -> None:
        if batch_rows < 1 or guard_rows < 0:
            raise ValueError(f"batch_rows must be ≥ 1 and guard_rows ≥ 0, got {batch_rows}, {guard_rows}")
        self.batch_rows = batch_rows
        self.min_rows = max(1, min_rows)
        self.guard_rows = guard_rows
        self._rng = np.random.default_rng(seed)

    def sample(self, *, buffer: Buffer, rows: int | None = None) -> ReplayBatch | None:
        size = buffer.size_rows
        if size < self.min_rows:
            return None
        self._buffer = buffer
        guarded = min(size - 1, max(0, size + self.guard_rows - buffer.capacity_rows))
        offsets = self._rng.integers(guarded, size, size=rows or self.batch_rows, dtype=np.int64)
        positions = (buffer.write_index - size + offsets) % buffer.capacity_rows  # offset 0: the oldest row
        return ReplayBatch(indices=positions, seqs=_seqs(buffer, positions))


class Prioritized(Uniform):
    """Proportional PER (Schaul et al. 2016) over the buffer's positions, with a sum tree.

    A new row enters with the largest priority given so far (1 at first). P(i) = p_i / Σ p, with
    p = (|δ| + ε)^α set by ``update_priorities`` from the TD errors the learner returns. Draws are
    stratified over the priority mass, then shuffled (the learner walks the batch in consecutive
    minibatches). ``weights`` = (p_i / p_min)^-β, β annealed linearly from β0 to 1 over
    ``beta_anneal_rows`` ingested rows (the run's env steps). ``eps`` must be > 0: a zero-priority row
    would never be drawn again and break the weights. With ``guard_rows`` the oldest rows that ingests in
    flight would overwrite are not drawn (their priority mass is left out of the draw; as ``Uniform``).
    Schaul et al. draw each gradient step's minibatch from the current priorities; the offpolicy workflow
    bounds the gradient steps per draw (``offpolicy.prioritized_steps_per_call``).

    Example::

        strategy = Prioritized(capacity_rows=buffer.capacity_rows, batch_rows=256, alpha=0.6, beta0=0.4,
                               beta_anneal_rows=50_000)
        batch = strategy.sample(buffer=buffer)             # batch.columns["weights"]
        strategy.update_priorities(buffer=buffer, batch=batch, td_errors=td)
    """

    def __init__(self, *, capacity_rows: int, batch_rows: int, alpha: float = 0.6, beta0: float = 0.4,
                 beta_anneal_rows: int = 1, eps: float = 1e-6, min_rows: int = 1, seed: int = 0,
                 guard_rows: int = 0) -> None:
        if not eps > 0.0:
            raise ValueError(f"Prioritized needs eps > 0 (a zero priority is never drawn again), got {eps}")
        super().__init__(batch_rows=batch_rows, min_rows=min_rows, seed=seed, guard_rows=guard_rows)
        self.tree = SumTree(capacity=capacity_rows)
        self.alpha, self.beta0, self.eps = alpha, beta0, eps
        self.beta_anneal_rows = max(1, beta_anneal_rows)
        self.max_priority = 1.0
        self._admitted_seq = 0

    def beta(self, *, buffer: Buffer) -> float:
        fraction = min(1.0, buffer.total_rows_ingested / self.beta_anneal_rows)
        return self.beta0 + (1.0 - self.beta0) * fraction

    def _admit(self, buffer: Buffer) -> None:
        positions = buffer.positions_since(seq=self._admitted_seq)
        if positions.size:
            self.tree.update(indices=positions, priorities=np.full(positions.size, self.max_priority))
        self._admitted_seq = buffer.total_rows_ingested

    def sample(self, *, buffer: Buffer, rows: int | None = None) -> ReplayBatch | None:
        self._admit(buffer)
        if buffer.size_rows < self.min_rows:
            return None
        self._buffer = buffer
        positions = self._rng.permutation(self._draw(buffer=buffer, rows=rows or self.batch_rows))
        weights = self.tree.importance_weights(indices=positions, beta=self.beta(buffer=buffer))
        return ReplayBatch(indices=positions, seqs=_seqs(buffer, positions), columns={"weights": weights})

    def _draw(self, *, buffer: Buffer, rows: int) -> np.ndarray:
        """Stratified draws over the tree with the guarded (oldest, about to be overwritten) rows left out."""
        size = buffer.size_rows
        guarded = min(size - 1, max(0, size + self.guard_rows - buffer.capacity_rows))
        if guarded == 0:
            return self.tree.sample(batch_size=rows, rng=self._rng)
        oldest = (buffer.write_index - size + np.arange(guarded, dtype=np.int64)) % buffer.capacity_rows
        saved = self.tree.get(indices=oldest)
        self.tree.update(indices=oldest, priorities=np.zeros(guarded))
        try:
            return self.tree.sample(batch_size=rows, rng=self._rng)
        finally:
            self.tree.update(indices=oldest, priorities=saved)

    def update_priorities(self, *, buffer: Buffer, batch: ReplayBatch, td_errors: np.ndarray) -> int:
        """Set (|δ| + ε)^α at the rows that still hold the sampled transition; returns how many."""
        priorities = np.power(np.abs(np.asarray(td_errors, dtype=np.float64)) + self.eps, self.alpha)
        if priorities.shape != batch.indices.shape:
            raise ValueError(f"{priorities.shape[0]} TD errors for {batch.indices.shape[0]} rows")
        self._admit(buffer)  # rows not admitted yet would take the max priority over these later
        same = _seqs(buffer, batch.indices) == batch.seqs
        self.tree.update(indices=batch.indices[same], priorities=priorities[same])
        if priorities.size:
            self.max_priority = max(self.max_priority, float(priorities.max()))
        return int(same.sum())

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"priorities": self.tree.get(indices=np.arange(self.tree.capacity)),
                "scalars": np.array([self.max_priority, self._admitted_seq], dtype=np.float64)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        written = np.flatnonzero(state["priorities"] > 0)     # 0: a leaf never written (keeps min() right)
        self.tree.update(indices=written, priorities=state["priorities"][written])
        self.max_priority, admitted = (float(v) for v in state["scalars"])
        self._admitted_seq = int(admitted)


def nstep_returns(*, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, valid_steps: np.ndarray,
                  gamma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step targets for transitions starting at column 0 of [B, n] arrays of consecutive steps.

    Row b may look ``valid_steps[b]`` ≥ 1 steps ahead (the rest of its fragment). The sum stops after
    the first step that terminated or was truncated. Returns ``returns_n`` = Σ_{i<k} γ^i r_i,
    ``discount_n`` = γ^k · (1 − terminated at step k−1) — truncation keeps bootstrapping from that
    step's ``next_obs``, the true final observation — and ``last`` = k − 1 per row.
    """
    batch, n = rewards.shape
    returns = np.zeros(batch, dtype=np.float64)
    last = np.zeros(batch, dtype=np.int64)
    alive = np.ones(batch, dtype=bool)
    for j in range(n):
        alive &= j < valid_steps
        returns += np.where(alive, gamma ** j * rewards[:, j], 0.0)
        last = np.where(alive, j, last)
        alive &= ~(terminated[:, j] | truncated[:, j])
    ended_terminal = terminated[np.arange(batch), last]
    discount = np.power(gamma, last + 1) * (1.0 - ended_terminal)
    return returns.astype(np.float32), discount.astype(np.float32), last


class NStep(SampledReplay):
    """n-step transitions on top of a sampler (Uniform or Prioritized): composition, not a subclass.

    Rows are env-major fragments: ``segment_rows`` (an actor's ``fragment_steps``) consecutive rows
    per env, in time order, so rows ``seq .. seq + k`` continue one episode stream unless one ended.
    A transition never crosses its fragment's end (it is then shorter than n and bootstraps from the
    true next observation), a termination (no bootstrap) or a truncation (bootstrap).

    Example::

        strategy = NStep(inner=Uniform(batch_rows=256, min_rows=1000), n=3, gamma=0.99, segment_rows=32)
        batch = strategy.sample(buffer=buffer)    # columns returns_n, discount_n; next_indices
    """

    def __init__(self, *, inner: Uniform, n: int, gamma: float, segment_rows: int) -> None:
        if n < 1 or segment_rows < 1:
            raise ValueError(f"NStep needs n ≥ 1 and segment_rows ≥ 1, got {n}, {segment_rows}")
        self.inner, self.n, self.gamma, self.segment_rows = inner, n, gamma, segment_rows

    def sample(self, *, buffer: Buffer, rows: int | None = None) -> ReplayBatch | None:
        batch = self.inner.sample(buffer=buffer, rows=rows)
        if batch is None:
            return None
        valid = np.minimum(self.n, self.segment_rows - batch.seqs % self.segment_rows)
        steps = np.arange(self.n)
        ahead = np.where(steps[None, :] < valid[:, None], steps[None, :], 0)
        positions = (batch.indices[:, None] + ahead) % buffer.capacity_rows
        cols = buffer.read(indices=positions.reshape(-1), keys=["rewards", "terminated", "truncated"])
        cols = {key: value.reshape(positions.shape) for key, value in cols.items()}
        returns_n, discount_n, last = nstep_returns(rewards=cols["rewards"], terminated=cols["terminated"],
                                                    truncated=cols["truncated"], valid_steps=valid, gamma=self.gamma)
        next_indices = positions[np.arange(len(last)), last]
        return ReplayBatch(indices=batch.indices, seqs=batch.seqs, next_indices=next_indices,
                           next_seqs=batch.seqs + last,
                           columns={**batch.columns, "returns_n": returns_n, "discount_n": discount_n})

    def consumed(self, *, indices: np.ndarray) -> None:
        self.inner.consumed(indices=indices)

    def update_priorities(self, *, buffer: Buffer, batch: ReplayBatch, td_errors: np.ndarray) -> int:
        return self.inner.update_priorities(buffer=buffer, batch=batch, td_errors=td_errors)

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.inner.load_state_dict(state)
