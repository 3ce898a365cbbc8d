"""The rows of a MARLess round: each policy's batch, the round's episodes, and which rows are an agent's own.

An env keeps stepping until its last agent is done, so an agent that finished before the others gets
*padding* rows from the actor (its last observation, action 0, log-prob 0, reward 0, terminated) until the
env resets: the VDN post-processing needs a row for every agent at every step. The actor marks each row
``alive`` (the agent acted in it); padding rows are ``alive`` False and are masked out of every loss and
target: the critic's GAE, value fit and value normalisation and the PPO surrogate (marless/learner.py), the
IQL replay and VDN's Q_tot (marless/value_learner.py), and the similarity samples of the sharing detector.
``marless/dead_rows/<agent>`` reports each agent's share of padding rows per round.

Example::

    batch = policy_batch(results=results, members=["agent_0"], agents=agents)
    index = live_index(arrays=batch.arrays)   # None: every row is live
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nimbus.data.codec import Message
from nimbus.marless.agent_id import append_agent_id

if TYPE_CHECKING:   # the actor function's module (torch, the envs): only its result's type is read here
    from nimbus.marless.actor import MultiAgentActorResult

ALIVE = "alive"
SAMPLES_PER_AGENT = 512  # (obs, action) rows per agent kept for the similarity measure (marless/sharing.py)


def live_index(*, arrays: dict[str, Any]) -> np.ndarray | None:
    """The indices of the rows whose agent was live; None when every row is (or the rows carry no ``alive``:
    written before the column existed)."""
    alive = arrays.get(ALIVE)
    if alive is None:
        return None
    alive = np.asarray(alive, dtype=bool)
    return None if alive.all() else np.flatnonzero(alive)


def agent_alive(*, results: list[Message], agent: str) -> np.ndarray:
    """``<agent>/alive`` of every result in order (all True for results without the column)."""
    return np.concatenate([np.asarray(r.arrays[f"{agent}/{ALIVE}"], dtype=bool) if f"{agent}/{ALIVE}" in r.arrays
                           else np.ones(len(r.arrays[f"{agent}/rewards"]), dtype=bool) for r in results])


def dead_fraction(*, results: list[Message], agent: str) -> float:
    """The share of ``agent``'s rows this round that are padding (0 when it never finishes before the others)."""
    alive = agent_alive(results=results, agent=agent)
    return float(1.0 - alive.mean()) if alive.size else 0.0


def live_samples(*, results: list[Message], agent: str) -> np.ndarray:
    """The agent's newest ``SAMPLES_PER_AGENT`` live (observation, action) rows, float64, for the similarity."""
    obs = np.concatenate([r.arrays[f"{agent}/obs"] for r in results])
    actions = np.concatenate([r.arrays[f"{agent}/actions"] for r in results])
    rows = np.concatenate([obs.reshape(len(obs), -1), actions.reshape(len(actions), -1)], axis=1)
    alive = agent_alive(results=results, agent=agent)
    if not alive.all():
        rows = rows[alive]
    return rows[-SAMPLES_PER_AGENT:].astype(np.float64)


@dataclass
class Episodes:
    """One round's finished episodes: per-agent mean return, each episode's global return (mean over agents)."""

    agent_means: dict[str, float]
    global_returns: list[float]
    samples: dict[str, np.ndarray] = field(default_factory=dict)
    dead_rows: dict[str, float] = field(default_factory=dict)   # agent → share of its rows that are padding

    @classmethod
    def collect(cls, *, results: list[MultiAgentActorResult], agents: list[str]) -> Episodes:
        per_agent: dict[str, list[float]] = {agent: [] for agent in agents}
        global_returns: list[float] = []
        for result in results:
            returns = result.episode_returns
            for agent in agents:
                per_agent[agent] += [float(x) for x in returns.get(agent, [])]
            counts = {len(returns.get(agent, [])) for agent in agents}
            if len(counts) == 1:   # every agent's episodes end together (MPE): the global return per episode
                global_returns += [float(np.mean([returns[agent][i] for agent in agents])) for i in range(counts.pop())]
        means = {agent: float(np.mean(values)) for agent, values in per_agent.items() if values}
        return cls(agent_means=means, global_returns=global_returns)


def policy_batch(*, results: list[Message], members: list[str], agents: list[str], agent_id: bool = False) -> Message:
    """One policy's rows: every member agent's (agent order; actors in rank order within an agent), with
    ``agent_index`` (into ``agents``) and, when the actors recorded it, the global state of each row; with
    ``agent_id``, ``obs`` and ``next_obs`` carry the one-hot of ``agent_index`` (marless/agent_id.py)."""
    columns: dict[str, list[np.ndarray]] = {}
    for agent in members:
        prefix = f"{agent}/"
        for result in results:
            rows = 0
            for name, array in result.arrays.items():
                if name.startswith(prefix):
                    columns.setdefault(name[len(prefix):], []).append(array)
                    rows = len(array)
            columns.setdefault("agent_index", []).append(np.full(rows, agents.index(agent), dtype=np.int64))
            for shared in ("state", "next_state"):
                if shared in result.arrays:
                    columns.setdefault(shared, []).append(result.arrays[shared])
    arrays = {k: np.concatenate(v) for k, v in columns.items()}
    if agent_id:
        for name in ("obs", "next_obs"):
            arrays[name] = append_agent_id(obs=arrays[name], agent_index=arrays["agent_index"], num_agents=len(agents))
    return Message(header={"members": members}, arrays=arrays)
