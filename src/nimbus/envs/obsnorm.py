"""Observation normalisation across functions (``algo.normalize_obs``), as data that travels with weights.

The running statistics are part of a policy version: the learner publishes them beside the weights
(extras ``obs_rms.mean``, ``obs_rms.var``, ``obs_rms.count``). An actor normalises with the statistics of
the version it acts with, stores the *normalised* observations in the buffer (so the update sees
exactly what the policy saw, as SB3's VecNormalize does), and reports the raw observations' moments of
its fragment. The driver merges the actors' moments and hands them to the learner, which folds them
into the statistics it publishes with the next version.

Example::

    rms = rms_from_extras(extras=load_model(model=m, message=weights))    # None when disabled
    obs_for_policy = normalize(rms=rms, obs=raw_obs)
"""

from __future__ import annotations

import numpy as np

from nimbus.envs.normalize import RunningMeanStd

PREFIX = "obs_rms."
MOMENT_KEYS = ("obs_moments.mean", "obs_moments.var", "obs_moments.count")


def rms_from_extras(*, extras: dict[str, np.ndarray], shape: tuple[int, ...] | None = None) -> RunningMeanStd | None:
    """The statistics published with a version; fresh ones of ``shape`` if none were published yet."""
    state = {key[len(PREFIX):]: np.array(value) for key, value in extras.items() if key.startswith(PREFIX)}
    if state:
        return RunningMeanStd.from_state(state=state)
    return RunningMeanStd(shape=shape) if shape is not None else None


def rms_to_extras(*, rms: RunningMeanStd | None) -> dict[str, np.ndarray]:
    return {} if rms is None else {PREFIX + key: np.asarray(value) for key, value in rms.state().items()}


def normalize(*, rms: RunningMeanStd | None, obs: np.ndarray) -> np.ndarray:
    return obs if rms is None else rms.normalize(obs=obs)


def fragment_moments(*, raw_obs: np.ndarray) -> dict[str, np.ndarray]:
    """Moments of one fragment's raw observations (rows first), as result arrays."""
    rms = RunningMeanStd(shape=raw_obs.shape[1:])
    rms.update(batch=raw_obs)
    return moments_arrays(rms=rms)


def moments_arrays(*, rms: RunningMeanStd | None) -> dict[str, np.ndarray]:
    """Moments as message arrays (empty when normalisation is off)."""
    if rms is None:
        return {}
    state = rms.state()
    return {MOMENT_KEYS[0]: state["mean"], MOMENT_KEYS[1]: state["var"], MOMENT_KEYS[2]: np.asarray(state["count"])}


def pop_moments(*, arrays: dict[str, np.ndarray]) -> RunningMeanStd | None:
    """Remove a fragment's moments from a result's arrays (they are not buffer columns)."""
    if MOMENT_KEYS[0] not in arrays:
        return None
    mean, var, count = (arrays.pop(key) for key in MOMENT_KEYS)
    return RunningMeanStd.from_state(state={"mean": np.array(mean), "var": np.array(var), "count": np.array(count)})


def merge(*, into: RunningMeanStd | None, other: RunningMeanStd | None) -> RunningMeanStd | None:
    if other is None:
        return into
    if into is None:
        return other
    into.merge(other=other)
    return into
