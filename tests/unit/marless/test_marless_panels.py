"""The MARLess report panels draw what the metrics rows and the map log hold (marless/report.py)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nimbus.marless.report import is_marless, plot_agent_returns, plot_marless_costs, plot_policy_map  # noqa: E402

ROWS = [{"round": k, "extras": {"marless/policies": p, "marless/return/agent_0": -30.0 + k,
                                "marless/return/agent_1": -20.0 - k,
                                "marless/global_return": -25.0, "marless/learner_cost_usd": 0.01 * (k + 1),
                                "marless/actor_cost_usd": 0.002 * (k + 1)}}
        for k, p in enumerate((2, 2, 1))]
MAPS = [{"round": 0, "agent_policy": {"agent_0": "p_agent_0", "agent_1": "p_agent_1"}, "actors": 4,
         "policies": ["p_agent_0", "p_agent_1"]},
        {"round": 1, "agent_policy": {"agent_0": "p_agent_0", "agent_1": "p_agent_1"}, "actors": 3,
         "policies": ["p_agent_0", "p_agent_1"]},
        {"round": 2, "agent_policy": {"agent_0": "p_agent_1", "agent_1": "p_agent_1"}, "actors": 2,
         "policies": ["p_agent_1"]}]


def lines_by_label(ax) -> dict[str, tuple[list, list]]:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


def test_only_multiagent_rows_get_the_panels() -> None:
    assert is_marless(ROWS) and not is_marless([{"round": 0, "extras": {"staleness/mean": 1.0}}])


def test_returns_panel_has_a_line_per_agent_and_the_global_return() -> None:
    fig, ax = plt.subplots()
    plot_agent_returns(ax, ROWS)
    lines = lines_by_label(ax)
    assert set(lines) == {"agent_0", "agent_1", "global"}
    assert lines["agent_0"] == ([0, 1, 2], [-30.0, -29.0, -28.0])
    assert lines["agent_1"][1] == [-20.0, -21.0, -22.0]
    plt.close(fig)


def test_policy_map_colours_each_agents_policy_and_counts_policies_and_actors() -> None:
    fig, ax = plt.subplots()
    plot_policy_map(ax, MAPS)
    grid = np.asarray(ax.get_images()[0].get_array())
    np.testing.assert_array_equal(grid, [[0, 0, 1], [1, 1, 1]])   # agent_0 moves to p_agent_1 in round 2
    twin = [other for other in fig.axes if other is not ax][0]
    steps = lines_by_label(twin)
    assert steps["policies"][1] == [2, 2, 1] and steps["actors"][1] == [4, 3, 2]
    plt.close(fig)


def test_cost_panel_separates_learner_and_actor_functions() -> None:
    fig, ax = plt.subplots()
    plot_marless_costs(ax, ROWS)
    lines = list(lines_by_label(ax).values())
    np.testing.assert_allclose(lines[0][1], [0.01, 0.02, 0.03])
    np.testing.assert_allclose(lines[1][1], [0.002, 0.004, 0.006])
    plt.close(fig)
