"""Each MARLess policy's versions in the Store: what a run starts from, what a policy that comes back into use
continues from, and which old versions a round forgets. marless/workflow.py calls these at build and at a round's
end; marless/checkpoint.py publishes a resumed run's versions.

* ``publish_versions``: version 0 of every policy (and critic, and QMIX's mixer), or a checkpoint's versions; the
  progress the run goes on from.
* ``adopt_map``: a new agent→policy map from the sharing controller. A returning policy's next version is a copy
  of its first agent's policy (weights, optimizer and critic), so no agent starts over.
* ``forget_versions``: the learners' spent keys and every version older than ``store.keep_versions``.

Example::

    progress = publish_versions(parts=parts, resume_from=None)   # every policy at version 0
    adopt_map(parts=parts, progress=progress, old=progress.agent_policy, new=new_map)
"""

from __future__ import annotations

import logging
from pathlib import Path

from nimbus.algos.multiagent import initial_messages
from nimbus.algos.multiagent.qmix import initial_mixer_message, mixer_key, mixer_keys
from nimbus.data.codec import Message
from nimbus.marless.checkpoint import check_policies, load_policies, publish_policies
from nimbus.marless.parts import MarlessParts, MarlessProgress, critic_key
from nimbus.models.weights import optim_key, weights_key

log = logging.getLogger(__name__)
VERSIONED_KEYS = ("weights/{policy}/{version}", "optim/{policy}/{version}", "target/{policy}/{version}")


def publish_versions(*, parts: MarlessParts, resume_from: Path | None) -> MarlessProgress:
    """Version 0 of every policy, or (``resume_from``) the checkpointed versions; the progress to go on from."""
    initial = {policy: initial_messages(algo=parts.algo, spaces=spaces, state_dim=parts.state_dim,
                                        num_agents=len(parts.agents), seed=parts.config.seed + index)
               for index, (policy, spaces) in enumerate(parts.policy_spaces.items())}
    if resume_from is None:
        progress = MarlessProgress(agent_policy=parts.sharing.initial_map())
        _publish_initial(parts=parts, progress=progress, initial=initial)
        return progress
    states = load_policies(path=Path(resume_from), policies=list(initial))
    check_policies(states=states, parts=parts, expected=initial)
    progress = publish_policies(states=states, parts=parts)
    log.warning("resuming from round %d (policy versions %s, %d env steps)", progress.rounds,
                progress.versions, progress.env_steps)
    return progress


def _publish_initial(*, parts: MarlessParts, progress: MarlessProgress, initial: dict[str, dict[str, Message]]) -> None:
    """Version 0 of every agent's policy (and critic), seeded per agent; all of them, so that sharing can later
    hand any agent its own policy."""
    store = parts.shared.store
    if parts.algo.name == "qmix":   # the mixer's version 0, seeded after the policies'
        store.put(key=mixer_key(part="weights", version=0), message=initial_mixer_message(
            algo=parts.algo, state_dim=parts.state_dim, num_agents=len(parts.agents),
            seed=parts.config.seed + len(initial)))
    for policy, messages in initial.items():
        store.put(key=weights_key(policy=policy, version=0), message=messages["weights"])
        progress.versions[policy] = 0
        if "critic" in messages:
            store.put(key=critic_key(policy=policy, version=0), message=messages["critic"])
            progress.critic_versions[policy] = 0


def adopt_map(*, parts: MarlessParts, progress: MarlessProgress, old: dict[str, str], new: dict[str, str]) -> None:
    """Adopt a new agent→policy map. A policy that comes back into use continues from the weights its first
    agent trained with until now (copied as a new version, so no worker's cache holds a stale one)."""
    returning = sorted(set(new.values()) - set(old.values()))
    for policy in returning:
        first = min(agent for agent, p in new.items() if p == policy)
        _copy_policy(parts=parts, progress=progress, source=old[first], target=policy)
    progress.agent_policy = dict(new)
    log.info("agent→policy map: %s", new)


def _copy_policy(*, parts: MarlessParts, progress: MarlessProgress, source: str, target: str) -> None:
    store = parts.shared.store
    version = progress.versions[target] + 1
    source_version = progress.versions[source]
    store.put(key=weights_key(policy=target, version=version),
              message=store.get(key=weights_key(policy=source, version=source_version)))
    if source_version > 0:
        store.put(key=optim_key(policy=target, version=version),
                  message=store.get(key=optim_key(policy=source, version=source_version)))
    progress.versions[target] = version
    if source in progress.critic_versions:
        critic_version = progress.critic_versions[target] + 1
        store.put(key=critic_key(policy=target, version=critic_version),
                  message=store.get(key=critic_key(policy=source, version=progress.critic_versions[source])))
        progress.critic_versions[target] = critic_version


def forget_versions(*, parts: MarlessParts, progress: MarlessProgress, active: list[str], stale: list[str]) -> None:
    """The keys the learners are done with, and versions older than ``store.keep_versions`` (every policy
    keeps its newest, trained or frozen)."""
    store, keep = parts.shared.store, parts.config.store.keep_versions
    stale = list(stale) + mixer_keys(version=progress.mixer_version - keep)   # QMIX's mixer
    for policy in active:
        version = progress.versions[policy] - keep
        if version >= 0:
            stale += [key.format(policy=policy, version=version) for key in VERSIONED_KEYS]
        critic = progress.critic_versions.get(policy, -1) - keep
        if critic >= 0:
            stale.append(critic_key(policy=policy, version=critic))
        for key in stale:
            store.delete(key=key)
