"""MARLess actor scaling (marless/scaling.py): S_j, I_j, the threshold, max vs mean, no evidence."""

from __future__ import annotations

import json
import math

import pytest

from nimbus.marless.config import MarlessConfig
from nimbus.marless.scaling import MarlessActorScaler, actor_count, scaling_ratio


def test_the_scaling_ratio_is_min_max_over_the_window() -> None:
    assert scaling_ratio(window=[1.0, 3.0, 2.0]) == pytest.approx((3.0 - 2.0) / (3.0 - 1.0))
    assert scaling_ratio(window=[1.0, 3.0, 1.0]) == pytest.approx(1.0)   # the lowest C: most actors
    assert scaling_ratio(window=[1.0, 3.0]) == pytest.approx(0.0)


@pytest.mark.parametrize("window", [[], [2.0], [2.0, 2.0], [1.0, 3.0, math.nan]])
def test_no_evidence_is_none(window: list[float]) -> None:
    assert scaling_ratio(window=window) is None


def test_max_when_the_mean_reaches_the_threshold_else_the_mean() -> None:
    # I_max 8, I_min 2, β 0.5 → threshold 3
    assert actor_count(per_policy=[2, 8], i_min=2, i_max=8, beta=0.5) == 8      # mean 5 ≥ 3: max
    assert actor_count(per_policy=[2, 2, 5], i_min=2, i_max=8, beta=0.5) == 5   # mean 3 ≥ 3: the max, 5
    assert actor_count(per_policy=[2, 2, 4], i_min=2, i_max=8, beta=0.5) == 3   # mean 2.67 < 3: rounded mean
    assert actor_count(per_policy=[], i_min=2, i_max=8, beta=0.5) == 2


def test_per_policy_counts_are_clipped_and_the_default_i_min_is_i_max_over_n() -> None:
    scaler = MarlessActorScaler(config=MarlessConfig(scaling="marless", i_max=8, beta=0.5), num_agents=4,
                                fixed_actors=3)
    assert scaler.i_min == 2 and scaler.initial() == 2
    scaler.observe(convexity={"p_a": 5.0, "p_b": 1.0})
    assert scaler.decide() == 2                       # one value each: no evidence → I_min
    scaler.observe(convexity={"p_a": 1.0, "p_b": 1.05})   # p_a: S = 1 → 8; p_b: S = 0 → clip(0, 2, 8) = 2
    assert scaler.decide() == 8 and scaler.per_policy == {"p_a": 8, "p_b": 2}
    scaler.observe(convexity={"p_a": 4.0})            # p_b no longer active: its window is dropped
    assert set(scaler.windows) == {"p_a"}
    # p_a's window 5, 1, 4: S = (5 − 4)/(5 − 1) = 0.25 → I = 2; the mean 2 < 3: 2
    assert scaler.decide() == 2 and scaler.per_policy == {"p_a": 2}


def test_fixed_mode_ignores_convexity() -> None:
    scaler = MarlessActorScaler(config=MarlessConfig(scaling="fixed", i_max=8), num_agents=3, fixed_actors=3)
    scaler.observe(convexity={"p_a": 1.0})
    scaler.observe(convexity={"p_a": 9.0})
    assert scaler.initial() == 3 and scaler.decide() == 3 and not scaler.needs_convexity


def test_a_restored_scaler_decides_as_the_original_would() -> None:
    config = MarlessConfig(scaling="marless", i_max=8, i_min=1, beta=0.5, scaling_window=3)
    original = MarlessActorScaler(config=config, num_agents=2, fixed_actors=1)
    for values in ({"p_a": 5.0, "p_b": 2.0}, {"p_a": 1.0, "p_b": 2.5}):
        original.observe(convexity=values)
    original.decide()
    restored = MarlessActorScaler(config=config, num_agents=2, fixed_actors=1)
    restored.load_state_dict(json.loads(json.dumps(original.state_dict())))   # through a manifest's JSON
    assert restored.state() == original.state()
    for scaler in (original, restored):
        scaler.observe(convexity={"p_a": 4.0, "p_b": 3.0})
    assert restored.decide() == original.decide() and restored.per_policy == original.per_policy
