from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nimbus.envs.normalize import RunningMeanStd


def test_merge_equals_stats_of_the_concatenated_data() -> None:
    rng = np.random.default_rng(0)
    parts = [rng.normal(loc=i, scale=i + 1, size=(n, 3)) for i, n in enumerate((5, 17, 1, 40))]
    merged = RunningMeanStd(shape=(3,))
    for part in parts:
        actor = RunningMeanStd(shape=(3,))
        actor.update(batch=part)
        merged.merge(other=actor)
    data = np.concatenate(parts)
    np.testing.assert_allclose(merged.mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(merged.var, data.var(axis=0), rtol=1e-12)
    assert merged.count == len(data)


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=5), seed=st.integers(0, 1000))
def test_incremental_updates_equal_one_update(sizes: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    parts = [rng.normal(size=(n, 2)) * 100 for n in sizes]
    incremental = RunningMeanStd(shape=(2,))
    for part in parts:
        incremental.update(batch=part)
    data = np.concatenate(parts)
    if len(data) == 0:
        assert incremental.count == 0
        return
    np.testing.assert_allclose(incremental.mean, data.mean(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(incremental.var, data.var(axis=0), rtol=1e-9, atol=1e-9)


def test_normalize_clips_and_returns_float32() -> None:
    stats = RunningMeanStd(shape=(2,))
    stats.update(batch=np.array([[0.0, 10.0], [2.0, 10.0]]))
    out = stats.normalize(obs=np.array([[1.0, 10.0], [1000.0, 10.0]]), clip=5.0)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.0, 0.0], [5.0, 0.0]], atol=1e-6)


def test_state_round_trip_is_plain_arrays() -> None:
    stats = RunningMeanStd(shape=(4,))
    stats.update(batch=np.arange(20.0).reshape(5, 4))
    state = stats.state()
    assert all(isinstance(value, np.ndarray) for value in state.values())
    restored = RunningMeanStd.from_state(state=state)
    np.testing.assert_array_equal(restored.mean, stats.mean)
    np.testing.assert_array_equal(restored.var, stats.var)
    assert restored.count == stats.count


def test_shape_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        RunningMeanStd(shape=(3,)).update(batch=np.zeros((2, 4)))
