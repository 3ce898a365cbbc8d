"""What a multi-agent run checks about its agents before any worker starts (issue 27): each check raises
``ConfigError`` (exit 2) naming the key.

* ``check_policy_spaces``: every agent mapped onto a policy has that policy's spaces. Policy ``p_<agent>`` is
  built for ``<agent>``'s observation and action spaces, so ``marless.agent_policy`` may map another agent onto it
  only when their spaces are identical (the same test ``marless.sharing`` groups by: ``sharing.space_signature``).
  Without it a mismatched map failed in the actors with a numpy error after every retry (exit 1).
"""

from __future__ import annotations

from collections.abc import Mapping

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
