"""What a multi-agent run checks about its agents before any worker starts: each check raises
``ConfigError`` (exit 2) naming the key.

* ``check_policy_spaces``: every agent mapped onto a policy has that policy's spaces. Policy ``p_<agent>`` is
  built for ``<agent>``'s observation and action spaces, so ``marless.agent_policy`` may map another agent onto it
  only when their spaces are identical (the same test ``marless.sharing`` groups by: ``sharing.space_signature``).
  Without it a mismatched map failed in the actors with a numpy error after every retry (exit 1).
* ``check_agent_spaces``: every agent observes a Box and acts in a space the algorithm trains; a Dict, Discrete
  or other observation, or a MultiDiscrete action, is refused naming the agent and how to adapt the env.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from nimbus.errors import ConfigError


def check_policy_spaces(*, agent_policy: Mapping[str, str], compatible: Mapping[str, str],
                        key: str = "marless.agent_policy") -> None:
    """``agent_policy`` (agent → ``p_<owner>``) against ``compatible`` (agent → space signature); names outside
    the env are left to marless/parts.py's ``check_agent_policy``, which runs first."""
    owners = {f"p_{agent}": agent for agent in compatible}
    for agent, policy in agent_policy.items():
        owner = owners.get(policy)
        if owner is None or agent not in compatible or compatible[agent] == compatible[owner]:
            continue
        raise ConfigError(f"{key}.{agent}: {policy} is built for {owner}'s spaces ({compatible[owner]}) but {agent} "
                          f"has {compatible[agent]}; only agents with identical observation and action spaces can "
                          f"share a policy (map {agent} onto one of theirs, or leave it on p_{agent})")


def check_policy_mapping(*, mapping: Mapping[str, str], compatible: Mapping[str, str]) -> None:
    """``marless.policy_mapping``: its agents are the env's, and agents mapped to one name have identical spaces."""
    first: dict[str, str] = {}
    for agent, policy in sorted(mapping.items()):
        if agent not in compatible:
            raise ConfigError(f"marless.policy_mapping.{agent}: the env has no agent {agent!r} "
                              f"(agents: {', '.join(sorted(compatible))})")
        if policy in {f"p_{other}" for other in compatible} and policy != f"p_{agent}":
            raise ConfigError(f"marless.policy_mapping.{agent}: {policy} is another agent's own policy name; "
                              "name a shared policy otherwise")
        owner = first.setdefault(policy, agent)
        if compatible[agent] != compatible[owner]:
            raise ConfigError(f"marless.policy_mapping.{agent}: {policy} also holds {owner}, whose spaces "
                              f"({compatible[owner]}) differ from {agent}'s ({compatible[agent]}); only agents with "
                              "identical observation and action spaces can share a policy")


def check_full_sharing(*, compatible: Mapping[str, str]) -> None:
    """``marless.sharing: full`` puts every agent on one network: their spaces must be identical."""
    if len(set(compatible.values())) > 1:
        kinds: dict[str, list[str]] = {}
        for agent, signature in sorted(compatible.items()):
            kinds.setdefault(signature, []).append(agent)
        listed = "; ".join(f"{', '.join(agents)}: {signature}" for signature, agents in sorted(kinds.items()))
        raise ConfigError(f"marless.sharing: full needs every agent to have the same spaces; this env has "
                          f"{len(kinds)} kinds ({listed}). Use sharing: static (one policy per kind) or a "
                          "marless.policy_mapping (nimbus groups agents by space and pads no observation: "
                          "docs/marless.md)")



VALUE_ALGOS = ("iql", "vdn", "qmix")   # Q-networks: one output per action, so Discrete actions only


def check_agent_spaces(*, spaces: Mapping[str, Any], algo_name: str, env_id: str) -> None:
    """Every agent's observation is a Box and its action space one the algorithm trains; else exit 2 naming the
    agent and how to adapt the env (its own factory is where a multi-agent env is wrapped: ``env.wrappers`` is
    refused for these runs)."""
    for agent, agent_spaces in sorted(spaces.items()):
        _check_observation_space(agent=agent, space=agent_spaces.observation, env_id=env_id)
        _check_action_space(agent=agent, space=agent_spaces.action, algo_name=algo_name, env_id=env_id)


def _check_observation_space(*, agent: str, space: gym.Space, env_id: str) -> None:
    where = f"env.id: {env_id}'s agent {agent!r}"
    if isinstance(space, gym.spaces.Box):
        return
    if isinstance(space, gym.spaces.Dict):
        raise ConfigError(f"{where} observes a Dict ({', '.join(space.spaces)}); the multi-agent networks read one "
                          "Box per agent. Flatten it in your env factory (gymnasium.spaces.flatten_space(space) for "
                          "the space, gymnasium.spaces.flatten(space, obs) for each observation); if it carries the "
                          "legal actions, name its entries 'observation' and 'action_mask' (PettingZoo's convention, "
                          "which nimbus reads as an action mask)")
    if isinstance(space, gym.spaces.Discrete):
        index = f"obs - {int(space.start)}" if int(space.start) else "obs"
        raise ConfigError(f"{where} observes {space}, an index; the multi-agent networks read a Box. One-hot it in "
                          f"your env factory: observation space Box(0, 1, ({int(space.n)},), float32) and "
                          f"np.eye({int(space.n)}, dtype=np.float32)[{index}] for each observation "
                          "(gymnasium.spaces.flatten does the same)")
    raise ConfigError(f"{where} observes {space}; the multi-agent networks read a Box. Flatten it in your env "
                      "factory (gymnasium.spaces.flatten_space(space), gymnasium.spaces.flatten(space, obs))")


def _check_action_space(*, agent: str, space: gym.Space, algo_name: str, env_id: str) -> None:
    discrete = isinstance(space, gym.spaces.Discrete)
    box = isinstance(space, gym.spaces.Box) and len(space.shape) == 1
    if discrete or (box and algo_name not in VALUE_ALGOS):
        return
    accepted = "Discrete actions" if algo_name in VALUE_ALGOS else "Discrete or 1-D Box actions"
    where = f"algo.name: {algo_name} trains {accepted}, but {env_id}'s agent {agent!r} has {space}"
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = [int(n) for n in np.asarray(space.nvec).reshape(-1)]
        raise ConfigError(f"{where}. Make it one Discrete({int(np.prod(nvec))}) of the joint choices in your env "
                          f"factory: step with np.unravel_index(action, {nvec}) (np.ravel_multi_index maps a choice "
                          "back)")
    if box:
        raise ConfigError(f"{where}, continuous; use ippo or mappo (Gaussian policies), or discretise it in your "
                          "env factory")
    raise ConfigError(f"{where}. Give the agent a Discrete action space in your env factory")
