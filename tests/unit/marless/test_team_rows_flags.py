"""The team's joint rows (marless/team_rows.py ``align_team_rows``) from hand-made batches: the team is truncated
when any agent is (a time limit cut the episode: no agent's next value may be treated as terminal), terminated
only when every agent is, and an agent's action masks travel with its rows."""

from __future__ import annotations

import numpy as np

from nimbus.marless.team_rows import align_team_rows

AGENTS = ["a", "b"]


def part(*, agent_index: int, truncated: list[bool], terminated: list[bool], masks: bool = False) -> dict:
    rows = len(truncated)
    columns = {"agent_index": np.full(rows, agent_index), "rewards": np.ones(rows, np.float32),
               "truncated": np.array(truncated), "terminated": np.array(terminated),
               "obs": np.zeros((rows, 2 + agent_index), np.float32), "next_obs": np.zeros((rows, 2 + agent_index)),
               "actions": np.zeros(rows, np.int64)}
    if masks:
        columns["action_mask"] = np.ones((rows, 3), bool)
        columns["next_action_mask"] = np.ones((rows, 3), bool)
    return columns


def test_truncated_when_any_agent_is_terminated_when_all_are() -> None:
    joint = align_team_rows(parts=[part(agent_index=0, truncated=[False, True, False], terminated=[True, False, True]),
                                   part(agent_index=1, truncated=[False, False, False], terminated=[False, False, True],
                                        masks=True)], all_agents=AGENTS)
    assert joint["truncated"].tolist() == [False, True, False]
    assert joint["terminated"].tolist() == [False, False, True]
    assert joint["a/obs"].shape == (3, 2) and joint["b/obs"].shape == (3, 3)      # each agent keeps its width
    assert "b/action_mask" in joint and "a/action_mask" not in joint
