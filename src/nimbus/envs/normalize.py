"""Running mean/variance of observations, mergeable across actors (parallel Welford, Chan et al.).

The statistics are plain arrays (`state()`), so they travel with the policy weights through the
codec. Each actor keeps a `RunningMeanStd` of the observations *it saw since the last weights it
received*; the learner merges those deltas into the global statistics and broadcasts them back.
(Merging actors' cumulative statistics would count the shared history once per actor.)

Example::

    stats = RunningMeanStd(shape=(4,))
    stats.update(batch=obs_batch)                 # (N, 4)
    learner_stats.merge(other=stats)
    model_input = learner_stats.normalize(obs=obs_batch)
"""

from __future__ import annotations

import numpy as np

_EPSILON = 1e-8


class RunningMeanStd:
    """Mean, (population) variance and count of every element of an observation, in float64."""

    def __init__(self, *, shape: tuple[int, ...]) -> None:
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = 0.0

    def update(self, *, batch: np.ndarray) -> None:
        """Fold a batch of observations, shape (N, *shape), into the statistics."""
        batch = np.asarray(batch, dtype=np.float64)
        if batch.shape[1:] != self.mean.shape:
            raise ValueError(f"batch of shape {batch.shape} does not match statistics of shape {self.mean.shape}")
        if batch.shape[0] == 0:
            return
        self._merge_moments(mean=batch.mean(axis=0), var=batch.var(axis=0), count=float(batch.shape[0]))

    def merge(self, *, other: RunningMeanStd) -> None:
        """Fold another's statistics into these, as if its observations had been passed to update()."""
        if other.mean.shape != self.mean.shape:
            raise ValueError(f"cannot merge statistics of shape {other.mean.shape} into {self.mean.shape}")
        if other.count == 0:
            return
        self._merge_moments(mean=other.mean, var=other.var, count=other.count)

    def normalize(self, *, obs: np.ndarray, clip: float = 10.0) -> np.ndarray:
        """(obs − mean) / sqrt(var + ε), clipped to ±clip, as float32."""
        scaled = (np.asarray(obs, dtype=np.float64) - self.mean) / np.sqrt(self.var + _EPSILON)
        return np.clip(scaled, -clip, clip).astype(np.float32)

    def state(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": np.array(self.count, dtype=np.float64)}

    @classmethod
    def from_state(cls, *, state: dict[str, np.ndarray]) -> RunningMeanStd:
        stats = cls(shape=tuple(np.shape(state["mean"])))
        stats.mean = np.array(state["mean"], dtype=np.float64)
        stats.var = np.array(state["var"], dtype=np.float64)
        stats.count = float(state["count"])
        return stats

    def _merge_moments(self, *, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        total = self.count + count
        delta = mean - self.mean
        m2 = self.var * self.count + var * count + np.square(delta) * self.count * count / total
        self.mean = self.mean + delta * count / total
        self.var = m2 / total
        self.count = total
