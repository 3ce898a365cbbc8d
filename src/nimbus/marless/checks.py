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
        classes = sorted(set(compatible.values()))
        raise ConfigError(f"marless.sharing: full needs every agent to have the same spaces; this env has "
                          f"{len(classes)} kinds ({'; '.join(classes)}). Use sharing: static (one policy per kind) "
                          "or a marless.policy_mapping")

