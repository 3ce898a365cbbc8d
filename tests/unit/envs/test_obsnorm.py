import numpy as np

from nimbus.envs.normalize import RunningMeanStd
from nimbus.envs.obsnorm import fragment_moments, merge, pop_moments, rms_from_extras, rms_to_extras


def test_fragment_moments_merge_to_the_statistics_of_all_rows() -> None:
    rng = np.random.default_rng(0)
    fragments = [rng.normal(loc=3.0, scale=2.0, size=(50, 3)) for _ in range(4)]
    merged = None
    for fragment in fragments:
        arrays = {"obs": fragment, **fragment_moments(raw_obs=fragment)}
        merged = merge(into=merged, other=pop_moments(arrays=arrays))
        assert set(arrays) == {"obs"}
    everything = np.concatenate(fragments)
    np.testing.assert_allclose(merged.mean, everything.mean(axis=0))
    np.testing.assert_allclose(merged.var, everything.var(axis=0))
    assert merged.count == 200


def test_statistics_round_trip_through_weight_extras() -> None:
    rms = RunningMeanStd(shape=(2,))
    rms.update(batch=np.array([[1.0, 2.0], [3.0, 6.0]]))
    back = rms_from_extras(extras=rms_to_extras(rms=rms))
    np.testing.assert_array_equal(back.mean, rms.mean)
    assert back.count == 2
    assert rms_from_extras(extras={}) is None
    assert rms_from_extras(extras={}, shape=(2,)).count == 0
