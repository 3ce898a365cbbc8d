"""MARLess learner sharing (marless/sharing.py) on hand-made data: the detector's normalisation, slope and
toggling, the N' sequence, KMeans recovering two clear clusters, the convexity pick, the controller's maps."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nimbus.marless.config import MarlessConfig
from nimbus.marless.sharing import (
    PerformanceDetector,
    SharingController,
    base_agent,
    group_agents,
    least_squares_slope,
    noise_scaled_slope,
    num_groups,
    similarity,
)


def test_slope_is_the_least_squares_line() -> None:
    assert least_squares_slope([1.0, 3.0, 5.0, 7.0]) == pytest.approx(2.0)
    assert least_squares_slope([0.0, 1.0, 0.0, 1.0]) == pytest.approx(0.2)   # Σ(x-x̄)(y-ȳ)/Σ(x-x̄)² = 1/5


def test_rewards_are_min_max_normalised_per_agent_over_their_history() -> None:
    detector = PerformanceDetector(window=3, gamma=-10.0)
    detector.observe(agent_returns={"a": -30.0, "b": 5.0})
    assert detector.window == [0.5]                       # no spread yet: the middle
    detector.observe(agent_returns={"a": -10.0, "b": 5.0})
    assert detector.window[-1] == pytest.approx((1.0 + 0.5) / 2)
    detector.observe(agent_returns={"a": -20.0, "b": 1.0})   # a: (−20+30)/20 = 0.5; b: (1−1)/4 = 0
    assert detector.window[-1] == pytest.approx(0.25)


def test_the_detector_toggles_only_with_a_full_window_and_a_slope_below_gamma_then_clears() -> None:
    detector = PerformanceDetector(window=4, gamma=0.1)
    rising = [{"a": float(v)} for v in (0, 1, 2)]
    assert [detector.observe(agent_returns=r) for r in rising] == [False, False, False]   # window not full
    assert math.isnan(detector.slope)
    # a falling reward: (0, 1, 2, 0) normalised → 0.5, 1, 1, 0 → slope −0.15; no rounds before the window, so σ is
    # the window's own: std(0.5, 0, −1) / √2 = 0.54 → k = −0.28 < 0.1
    assert detector.observe(agent_returns={"a": 0.0}) is True
    assert detector.slope == pytest.approx(-0.15 / (np.std([0.5, 0.0, -1.0], ddof=1) / math.sqrt(2)))
    assert detector.slope == pytest.approx(noise_scaled_slope(window=[0.5, 1.0, 1.0, 0.0], before=[]))
    assert detector.window == []                                  # cleared after the switch
    assert detector.observe(agent_returns={"a": 5.0}) is False    # refilling


def test_a_steep_rise_does_not_toggle() -> None:
    detector = PerformanceDetector(window=3, gamma=0.1)
    for value in (0.0, 10.0):
        detector.observe(agent_returns={"a": value})
    # normalised 0.5, 1.0, then 20 is the new max: 1.0 → slope 0.25 over σ = std(0.5, 0) / √2 = 0.25 → k = 1 ≥ 0.1
    assert detector.observe(agent_returns={"a": 20.0}) is False
    assert detector.slope == pytest.approx(1.0)


def test_a_round_without_episodes_is_not_observed() -> None:
    detector = PerformanceDetector(window=2, gamma=0.1)
    assert detector.observe(agent_returns={}) is False and detector.window == []


@pytest.mark.parametrize(("agents", "expected"), [(3, [2, 3, 3]), (6, [2, 4, 6, 6]), (8, [2, 4, 8, 8]),
                                                  (16, [2, 4, 8, 16, 16]), (5, [2, 4, 5])])
def test_the_policy_count_sequence(agents: int, expected: list[int]) -> None:
    assert [num_groups(enabling=j, num_agents=agents) for j in range(1, len(expected) + 1)] == expected


def test_the_cap_is_two_to_the_floor_log2_n_plus_one() -> None:
    # N = 20: cap 2^(4+1) = 32, clipped to N; the 5th enabling would be 32
    assert num_groups(enabling=5, num_agents=20) == 20
    assert num_groups(enabling=4, num_agents=20) == 16


def _two_clusters(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    left = {f"agent_{i}": rng.normal(loc=-4.0, scale=0.5, size=(200, 3)) for i in (0, 2, 4)}
    right = {f"agent_{i}": rng.normal(loc=4.0, scale=0.5, size=(200, 3)) for i in (1, 3, 5)}
    return dict(sorted({**left, **right}.items()))


def test_kl_is_small_within_a_cluster_and_large_across() -> None:
    agents, kl = similarity(samples=_two_clusters(), pca_dims=2, bandwidth=0.5, kl_samples=128, seed=0)
    i, j, k = agents.index("agent_0"), agents.index("agent_2"), agents.index("agent_1")
    assert kl[i, j] < 1.0 and kl[i, k] > 5.0
    assert np.all(np.diag(kl) == 0.0)


def test_kmeans_recovers_two_clear_clusters() -> None:
    samples = _two_clusters()
    agents, kl = similarity(samples=samples, pca_dims=2, bandwidth=0.5, kl_samples=128, seed=0)
    groups = group_agents(agents=agents, kl=kl, num_groups=2, seed=0, compatible={a: "same" for a in agents})
    assert groups == [["agent_0", "agent_2", "agent_4"], ["agent_1", "agent_3", "agent_5"]]


def test_agents_with_other_spaces_never_share() -> None:
    samples = _two_clusters()
    agents, kl = similarity(samples=samples, pca_dims=2, bandwidth=0.5, kl_samples=64, seed=0)
    compatible = {a: ("adversary" if a == "agent_0" else "good") for a in agents}
    groups = group_agents(agents=agents, kl=kl, num_groups=2, seed=0, compatible=compatible)
    assert ["agent_0"] in groups
    assert all(len(group) == 1 or "agent_0" not in group for group in groups)


def test_the_controller_groups_agents_of_different_widths_within_their_class() -> None:
    """simple_adversary: the adversary sees 8 numbers, the good agents 10; the samples (obs, action) differ in width,
    so similarity is computed per class (today's code concatenated them: a numpy ValueError at the first enabling)."""
    rng = np.random.default_rng(0)
    samples = {"adversary_0": rng.normal(size=(200, 9)),
               "agent_0": rng.normal(loc=-4.0, size=(200, 11)), "agent_1": rng.normal(loc=-4.0, size=(200, 11)),
               "agent_2": rng.normal(loc=4.0, size=(200, 11))}
    compatible = {"adversary_0": "adversary", "agent_0": "good", "agent_1": "good", "agent_2": "good"}
    config = MarlessConfig(sharing="marless", window=2, gamma=0.5)
    controller = SharingController(config=config, agents=list(samples), compatible=compatible, seed=0)
    flat, convexity = {a: 1.0 for a in samples}, {a: float(i) for i, a in enumerate(samples)}
    assert controller.decide(round=0, agent_returns=flat, samples=samples, convexity=convexity) is None
    shared = controller.decide(round=1, agent_returns=flat, samples=samples, convexity=convexity)
    assert controller.groups == [["adversary_0"], ["agent_0", "agent_1"], ["agent_2"]]
    assert shared == {"adversary_0": "p_adversary_0", "agent_0": "p_agent_1", "agent_1": "p_agent_1",
                      "agent_2": "p_agent_2"}


def test_the_base_model_is_the_member_with_the_highest_convexity() -> None:
    group = ["agent_0", "agent_1", "agent_2"]
    assert base_agent(group=group, convexity={"agent_0": 0.2, "agent_1": 3.0, "agent_2": 1.0}) == "agent_1"
    assert base_agent(group=group, convexity={"agent_0": math.nan, "agent_1": -1.0, "agent_2": math.nan}) == "agent_1"
    assert base_agent(group=group, convexity={"agent_0": 2.0, "agent_1": 2.0, "agent_2": 1.0}) == "agent_0"


def test_static_sharing_maps_every_compatible_agent_to_one_policy() -> None:
    agents = ["adversary_0", "agent_0", "agent_1"]
    compatible = {"adversary_0": "a", "agent_0": "g", "agent_1": "g"}
    controller = SharingController(config=MarlessConfig(sharing="static"), agents=agents, compatible=compatible, seed=0)
    assert controller.initial_map() == {"adversary_0": "p_adversary_0", "agent_0": "p_agent_0",
                                        "agent_1": "p_agent_0"}
    assert controller.decide(round=0, agent_returns={"agent_0": 1.0}, samples={}, convexity={}) is None


def test_the_marless_controller_enables_groups_then_gives_each_agent_its_policy_back() -> None:
    samples = _two_clusters()
    agents = list(samples)
    config = MarlessConfig(sharing="marless", window=2, gamma=0.5)
    controller = SharingController(config=config, agents=agents, compatible={a: "same" for a in agents}, seed=0)
    assert controller.initial_map() == {a: f"p_{a}" for a in agents}
    convexity = {a: float(i) for i, a in enumerate(agents)}   # agent_4 and agent_5 have the highest C
    flat = {a: 1.0 for a in agents}
    assert controller.decide(round=0, agent_returns=flat, samples=samples, convexity=convexity) is None
    shared = controller.decide(round=1, agent_returns=flat, samples=samples, convexity=convexity)
    assert shared == {"agent_0": "p_agent_4", "agent_2": "p_agent_4", "agent_4": "p_agent_4",
                      "agent_1": "p_agent_5", "agent_3": "p_agent_5", "agent_5": "p_agent_5"}
    assert controller.state()["sharing"] == 1.0 and controller.enablings == 1
    controller.decide(round=2, agent_returns=flat, samples=samples, convexity=convexity)
    back = controller.decide(round=3, agent_returns=flat, samples=samples, convexity=convexity)
    assert back == {a: f"p_{a}" for a in agents} and controller.state()["sharing"] == 0.0


def test_a_restored_controller_toggles_and_groups_as_the_original_would() -> None:
    """Mid-run (sharing on, one value in the refilling window, returns seen), restored through the manifest's
    JSON: the next rounds give the same maps and state."""
    samples = _two_clusters()
    agents = list(samples)
    config = MarlessConfig(sharing="marless", window=2, gamma=1000.0)   # above any k (|k| ≤ 100): every full window
    convexity = {a: float(i) for i, a in enumerate(agents)}
    rounds = [{a: 1.0 + i * (r % 3) for i, a in enumerate(agents)} for r in range(6)]
    original = SharingController(config=config, agents=agents, compatible={a: "same" for a in agents}, seed=0)
    for r in range(3):
        original.decide(round=r, agent_returns=rounds[r], samples=samples, convexity=convexity)
    assert original.enabled and len(original.detector.window) == 1
    restored = SharingController(config=config, agents=agents, compatible={a: "same" for a in agents}, seed=0)
    restored.load_state_dict(json.loads(json.dumps(original.state_dict())))
    assert restored.state_dict() == original.state_dict() and restored.groups == original.groups
    for r in range(3, 6):
        assert restored.decide(round=r, agent_returns=rounds[r], samples=samples, convexity=convexity) == \
            original.decide(round=r, agent_returns=rounds[r], samples=samples, convexity=convexity)
        assert restored.state_dict() == original.state_dict()
    assert original.toggles >= 2
