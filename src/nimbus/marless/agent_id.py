"""Agent-id conditioning: a one-hot of the agent's index appended to a policy's input.

Parameter sharing as MARL libraries know it gives one network to several agents and tells them apart by an agent
id in the input (BenchMARL, EPyMARL, RLlib). With ``marless.agent_id`` on (the default whenever agents may share a
policy: ``marless.sharing`` other than ``none``, or a ``marless.policy_mapping``) every policy, its IPPO critic
and IQL/VDN's Q-networks read observation ⊕ one-hot(agent index among the env's sorted agents). Every policy gets
it, shared or not, so the networks keep one shape when dynamic sharing maps agents onto another agent's policy
and copies weights back. The actor appends the one-hot before its forward pass; the driver appends it to the
``obs`` and ``next_obs`` of each policy's batch (marless/rows.py), so the learners need nothing else. MAPPO's
centralised critic already reads state ⊕ one-hot.

Example::

    spaces = with_agent_id(spaces=spaces, num_agents=3)            # Box(18,) → Box(21,)
    inputs = append_agent_id(obs=obs, agent_index=np.array([0, 2]), num_agents=3)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from nimbus.envs.spaces import EnvSpaces


def uses_agent_id(*, marless: Any) -> bool:
    """``marless.agent_id`` resolved: None means on whenever agents may share a policy."""
    if marless.agent_id is not None:
        return bool(marless.agent_id)
    return marless.sharing != "none" or bool(marless.policy_mapping)


def with_agent_id(*, spaces: EnvSpaces, num_agents: int) -> EnvSpaces:
    """The spaces a conditioned policy reads: the flattened observation ⊕ one-hot, float32."""
    obs = spaces.observation
    if not isinstance(obs, gym.spaces.Box):   # marless/checks.py refuses any other observation before a worker starts
        raise TypeError(f"agent-id conditioning needs a Box observation, got {obs}")
    low = np.concatenate([np.broadcast_to(obs.low, obs.shape).reshape(-1), np.zeros(num_agents)]).astype(np.float32)
    high = np.concatenate([np.broadcast_to(obs.high, obs.shape).reshape(-1), np.ones(num_agents)]).astype(np.float32)
    return EnvSpaces(observation=gym.spaces.Box(low, high, dtype=np.float32), action=spaces.action)


def append_agent_id(*, obs: np.ndarray, agent_index: np.ndarray, num_agents: int) -> np.ndarray:
    """Rows of observations [R, ...] with one-hot(agent_index [R]) appended: float32 [R, D + num_agents]."""
    rows = len(agent_index)
    one_hot = np.zeros((rows, num_agents), dtype=np.float32)
    one_hot[np.arange(rows), np.asarray(agent_index, dtype=np.int64)] = 1.0
    return np.concatenate([np.asarray(obs, dtype=np.float32).reshape(rows, -1), one_hot], axis=1)
