"""Sum tree for prioritized experience replay (Schaul et al. 2016), vectorised with numpy.

An array-backed binary tree over ``capacity`` leaves (any positive int; the leaf level is padded to a
power of two with zero-priority leaves). Each internal node holds the sum of its children, so the
total priority is the root and a prefix-sum search finds the leaf for a uniform draw in O(log n).
Min and max trees over the *written* leaves ride along for PER's importance weights and for giving
new transitions the largest priority seen so far.

Example::

    tree = SumTree(capacity=100_000)
    tree.update(indices=np.array([0, 1, 2]), priorities=np.array([1.0, 2.0, 1.0]))
    idx = tree.sample(batch_size=32, rng=np.random.default_rng(0))   # stratified over [0, total)
    w = tree.importance_weights(indices=idx, beta=0.4)               # max-normalised, in (0, 1]

Priorities are stored as float64 and each parent is recomputed from its children (never updated by
deltas), so the total does not drift after millions of updates.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Sum, min and max segment trees over ``capacity`` non-negative priorities."""

    def __init__(self, *, capacity: int) -> None:
        if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self._capacity = int(capacity)
        self._num_leaves = 1 << max(0, (self._capacity - 1).bit_length())  # next power of two
        self._depth = self._num_leaves.bit_length() - 1  # levels below the root
        size = 2 * self._num_leaves  # node 1 is the root; node i has children 2i, 2i+1
        self._sum = np.zeros(size, dtype=np.float64)
        self._min = np.full(size, np.inf, dtype=np.float64)  # +inf = never written
        self._max = np.full(size, -np.inf, dtype=np.float64)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def total(self) -> float:
        """Sum of all priorities."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """Smallest priority among the leaves written so far (+inf if none)."""
        return float(self._min[1])

    @property
    def max(self) -> float:
        """Largest priority among the leaves written so far (-inf if none)."""
        return float(self._max[1])

    def get(self, *, indices: np.ndarray) -> np.ndarray:
        """Priorities of the given leaves (0 for never-written leaves)."""
        idx = self._check_indices(indices)
        return self._sum[idx + self._num_leaves].copy()

    def update(self, *, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set ``priorities[i]`` at leaf ``indices[i]``; for a repeated index the last one wins."""
        idx = self._check_indices(indices)
        pri = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if pri.shape != idx.shape:
            raise ValueError(f"indices {idx.shape} and priorities {pri.shape} differ in length")
        if pri.size == 0:
            return
        if not np.all(np.isfinite(pri)) or np.any(pri < 0):
            raise ValueError("priorities must be finite and >= 0")
        # keep the last occurrence of each index (numpy leaves repeated fancy assignment unordered)
        rev_unique, rev_first = np.unique(idx[::-1], return_index=True)
        idx, pri = rev_unique, pri[::-1][rev_first]
        nodes = idx + self._num_leaves
        self._sum[nodes] = pri
        self._min[nodes] = pri
        self._max[nodes] = pri
        for _ in range(self._depth):
            nodes = np.unique(nodes >> 1)
            left, right = 2 * nodes, 2 * nodes + 1
            self._sum[nodes] = self._sum[left] + self._sum[right]
            self._min[nodes] = np.minimum(self._min[left], self._min[right])
            self._max[nodes] = np.maximum(self._max[left], self._max[right])

    def find_prefix_sum(self, *, values: np.ndarray) -> np.ndarray:
        """For each v in [0, total), the leaf i with sum(p[:i]) <= v < sum(p[:i+1]).

        Never returns a zero-priority leaf while the total is positive, even when floating-point
        rounding puts v at or past the total.
        """
        u = np.asarray(values, dtype=np.float64).reshape(-1).copy()
        nodes = np.ones(u.shape, dtype=np.int64)
        for _ in range(self._depth):
            left_sum = self._sum[2 * nodes]
            right_sum = self._sum[2 * nodes + 1]
            go_right = ((u >= left_sum) & (right_sum > 0)) | (left_sum <= 0)
            u = np.where(go_right, u - left_sum, u)
            nodes = 2 * nodes + go_right
        return nodes - self._num_leaves

    def sample(self, *, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified sampling: one draw from each of ``batch_size`` equal slices of [0, total).

        Leaf i is drawn with probability p_i / total per draw (marginally over the slices).
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        total = self.total
        if not total > 0:
            raise ValueError("cannot sample from a sum tree whose total priority is 0")
        segment = total / batch_size
        values = (np.arange(batch_size) + rng.random(batch_size)) * segment
        return self.find_prefix_sum(values=values)

    def importance_weights(self, *, indices: np.ndarray, beta: float) -> np.ndarray:
        """PER weights w_i = (N·P(i))^-β / max_j w_j = (p_i / p_min)^-β, in (0, 1] (float32)."""
        p = self.get(indices=indices)
        p_min = self.min
        if not (p_min > 0 and np.all(p > 0)):
            raise ValueError("importance weights need positive priorities (PER adds an epsilon)")
        return np.power(p / p_min, -beta).astype(np.float32)

    def _check_indices(self, indices: np.ndarray) -> np.ndarray:
        idx = np.asarray(indices).reshape(-1)
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False)
        if idx.size and (idx.min() < 0 or idx.max() >= self._capacity):
            raise IndexError(f"indices must lie in [0, {self._capacity}), got [{idx.min()}, {idx.max()}]")
        return idx
