"""MARLess checkpoints: every policy's networks at one round, and what the run needs to go on from there.

Layout, one directory per policy (frozen ones too: sharing may hand their agents back to them)::

    <run>/policies/p_<agent>/checkpoints/ckpt-000025/
        weights.safetensors     the policy (IPPO, MAPPO) or Q-network (IQL, VDN)
        optimizer.safetensors   its optimizer (absent at version 0)
        critic.safetensors      IPPO/MAPPO: the critic and its optimizer (algos/multiagent/messages.py)
        target.safetensors      IQL/VDN: the target network (absent while it is the weights themselves)
        actors.safetensors      with ``actors.restore_slots``: every actor rank's env slot and sequence
                                (marless/slot.py; the same file in every policy's checkpoint)
        replay.<key>.safetensors  with ``train.checkpoint_replay`` (IQL, VDN): one per replay value
        manifest.json           counters, and ``extra["marless"]``: every policy's version and critic version, the
                                agent→policy map, the sharing controller's and actor scaler's state, the next
                                round's actor count, the learner invocations so far

``nimbus train --resume RUN_DIR`` takes the newest round that every policy holds a checkpoint of that
verifies, so a crash between two policies' saves resumes from the round before. With ``actors.restore_slots``
(the shipped configs) each rank's episodes go on from its saved slot; without it, episodes in flight restart
from seeds of the resumed round. With ``train.checkpoint_replay`` IQL's and VDN's replay (the last rounds'
Store values) is saved as ``replay.<key>.safetensors`` parts, in the checkpoint of the policy that owns it
(VDN's team replay in the first policy's) and put back under its keys; without it, it refills from the
resumed round on. With both, a run resumed from round k is bitwise the run that was never stopped.

Example::

    save_policies(parts=parts, progress=progress, checkpointers=checkpointers)
    states = load_policies(path=run_dir, policies=["p_agent_0", "p_agent_1"])   # one round for all
    check_policies(states=states, parts=parts, expected=initial)                # another network: refused
    progress = publish_policies(states=states, parts=parts)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nimbus.algos.multiagent.qmix import mixer_key
from nimbus.config import NimbusConfig, parse_config
from nimbus.config.renamed import workflow_value
from nimbus.data.checkpoint import Checkpointer, CheckpointState, load_checkpoint, saved_policies
from nimbus.data.codec import Message
from nimbus.data.resume import progress_extra, resume_notice, schedule_horizon
from nimbus.data.store import KeyNotFound, Store
from nimbus.envs.slot_state import slots_from_message, slots_to_message
from nimbus.errors import CheckpointError
from nimbus.marless.parts import MarlessParts, MarlessProgress, critic_key
from nimbus.marless.value_learner import target_key
from nimbus.models.weights import optim_key, weights_key

log = logging.getLogger(__name__)
MARLESS_KEY = "marless"   # the manifest's extra["marless"]


def is_multiagent(*, config: dict[str, Any]) -> bool:
    """Whether a checkpoint's saved config (a plain dict) is a ``train.workflow: marless`` run's (``multiagent``, its
    old name, in a run written before)."""
    return workflow_value(config.get("train", {}).get("workflow"), warn=False) == "marless"


@dataclass(frozen=True)
class MarlessRun:
    """A finished or stopped multi-agent run as ``nimbus eval`` and ``nimbus export`` read it."""

    states: dict[str, CheckpointState]   # every policy's checkpoint of one round
    config: NimbusConfig
    agent_policy: dict[str, str]         # the map at that round


def load_run(*, path: Path) -> MarlessRun:
    """Every policy of the run at ``path`` at the newest round they all hold (``load_policies``)."""
    states = load_policies(path=Path(path), policies=saved_policies(run_dir=path))
    any_state = next(iter(states.values()))
    return MarlessRun(states=states, config=parse_config(data=any_state.config),
                   agent_policy=dict(any_state.extra[MARLESS_KEY]["agent_policy"]))


def policy_directory(*, run_dir: Path, policy: str) -> Path:
    return Path(run_dir) / "policies" / policy / "checkpoints"


def _get(*, store: Store, key: str) -> Message | None:
    try:
        return store.get(key=key)
    except KeyNotFound:
        return None


def run_state(*, parts: MarlessParts, progress: MarlessProgress) -> dict[str, Any]:
    """The run's own state at this round (the same in every policy's manifest)."""
    return {"versions": dict(progress.versions), "critic_versions": dict(progress.critic_versions),
            "agent_policy": dict(progress.agent_policy), "agents": list(parts.agents),
            "next_actors": progress.next_actors, "learner_invocations": progress.learner_invocations,
            "sharing": parts.sharing.state_dict(), "scaler": parts.scaler.state_dict(),
            "replays": {owner: list(keys) for owner, keys in progress.replays.items()}
            if parts.config.train.checkpoint_replay else {}, "mixer_version": progress.mixer_version}


def _mixer_parts(*, store: Store, parts: MarlessParts, progress: MarlessProgress) -> dict[str, Message]:
    """QMIX's mixer (weights, optimizer, target at its newest version), in the first policy's checkpoint."""
    if parts.algo.name != "qmix":
        return {}
    found = {f"mixer_{part}": _get(store=store, key=mixer_key(part=part, version=progress.mixer_version))
             for part in ("weights", "optim", "target")}
    return {name: message for name, message in found.items() if message is not None}


def replay_part(*, key: str) -> str:
    """The checkpoint part (file name without .safetensors) of one replay value: batch/p_agent_0/r4 →
    replay.batch.p_agent_0.r4."""
    return "replay." + key.replace("/", ".")


def _replay_parts(*, store: Store, replays: dict[str, list[str]], policies: list[str]) -> dict[str, dict[str, Message]]:
    """Each replay's Store values, in the checkpoint of the policy that owns the replay (IQL); VDN's team replay
    goes to the first policy's, once."""
    held: dict[str, dict[str, Message]] = {policy: {} for policy in policies}
    for owner, keys in replays.items():
        holder = owner if owner in held else policies[0]
        held[holder].update({replay_part(key=key): store.get(key=key) for key in keys})
    return held


def save_policies(*, parts: MarlessParts, progress: MarlessProgress, checkpointers: dict[str, Checkpointer]) -> None:
    """Each policy's newest networks and optimizer states, and the run's state (data/checkpoint.py: atomic)."""
    store = parts.shared.store
    extra = {**progress_extra(progress=progress, total_env_steps=parts.config.train.total_env_steps),
             MARLESS_KEY: run_state(parts=parts, progress=progress)}
    config = parts.config.model_dump(mode="json")
    actors = slots_to_message(states=progress.slot_states, slot_seq=progress.slot_seq) \
        if progress.slot_states else None                   # actors.restore_slots: the ranks' episodes go on
    replays = _replay_parts(store=store, replays=extra[MARLESS_KEY]["replays"], policies=sorted(checkpointers))
    replays[sorted(checkpointers)[0]].update(_mixer_parts(store=store, parts=parts, progress=progress))
    for policy, checkpointer in checkpointers.items():
        version = progress.versions[policy]
        networks = {"target": _get(store=store, key=target_key(policy=policy, version=version))}
        if policy in progress.critic_versions:
            networks["critic"] = store.get(key=critic_key(policy=policy, version=progress.critic_versions[policy]))
        checkpointer.save(state=CheckpointState(
            weights=store.get(key=weights_key(policy=policy, version=version)),
            optimizer=_get(store=store, key=optim_key(policy=policy, version=version)),
            policy_version=version, round=progress.rounds, env_steps=progress.env_steps, episodes=progress.episodes,
            config=config, extra=extra, actors=actors,
            parts={**{name: message for name, message in networks.items() if message is not None},
                   **replays[policy]}))


def _rounds(*, directory: Path) -> set[int]:
    return {int(path.name.removeprefix("ckpt-")) for path in Checkpointer(directory=directory).list()} \
        if directory.is_dir() else set()


def load_policies(*, path: Path, policies: list[str]) -> dict[str, CheckpointState]:
    """Every policy's checkpoint of the newest round they all hold and that verifies in all of them."""
    directories = {policy: policy_directory(run_dir=path, policy=policy) for policy in policies}
    missing = [policy for policy, directory in directories.items() if not _rounds(directory=directory)]
    if missing:
        raise CheckpointError(f"cannot resume {path} as a marless run: no checkpoint of "
                              f"{', '.join(missing)} under {path}/policies")
    common = set.intersection(*(_rounds(directory=directory) for directory in directories.values()))
    for round in sorted(common, reverse=True):
        try:
            return {policy: load_checkpoint(path=directory / f"ckpt-{round:06d}")
                    for policy, directory in directories.items()}
        except CheckpointError as exc:
            if "format version" in str(exc):
                raise
            log.warning("the checkpoints of round %d are unusable (%s); trying the round before", round, exc)
    raise CheckpointError(f"cannot resume {path}: no round has a checkpoint of every policy that verifies "
                          f"({', '.join(policies)})")


def _shapes(message: Message) -> dict[str, tuple[int, ...]]:
    return {name: tuple(array.shape) for name, array in message.arrays.items() if name.startswith("param.")}


def check_policies(*, states: dict[str, CheckpointState], parts: MarlessParts,
                   expected: dict[str, dict[str, Message]]) -> None:
    """Refuse checkpoints of another algorithm, other agents or other networks before any function sees them.
    ``expected``: each policy's version-0 messages as this config builds them (``weights``, ``critic``)."""
    any_state = next(iter(states.values()))
    saved_algo = any_state.config.get("algo", {}).get("name")
    if saved_algo != parts.config.algo.name:
        raise CheckpointError(f"the checkpoint was trained with algo.name={saved_algo!r}; this config has "
                              f"algo.name={parts.config.algo.name!r}")
    saved_agents = any_state.extra.get(MARLESS_KEY, {}).get("agents")
    if saved_agents != list(parts.agents):
        raise CheckpointError(f"the checkpoint's agents are {saved_agents}; {parts.config.env.id} has "
                              f"{list(parts.agents)}")
    for policy, state in states.items():
        saved = {"weights": state.weights, **state.parts}
        for name, message in expected[policy].items():
            built, found = _shapes(message), _shapes(saved[name]) if name in saved else {}
            differences = [f"{key}: checkpoint {found.get(key, 'absent')}, this config {built.get(key, 'absent')}"
                           for key in sorted(built.keys() | found.keys()) if built.get(key) != found.get(key)]
            if differences:
                raise CheckpointError(f"{policy}'s {name} in the checkpoint does not fit the network this config "
                                      f"builds: {'; '.join(differences[:8])}")


def publish_policies(*, states: dict[str, CheckpointState], parts: MarlessParts) -> MarlessProgress:
    """Put every policy's networks in the Store under the versions they had, restore the controllers; the
    progress to continue from."""
    store = parts.shared.store
    any_state = next(iter(states.values()))
    run = any_state.extra[MARLESS_KEY]
    for policy, state in states.items():
        store.put(key=weights_key(policy=policy, version=state.policy_version), message=state.weights)
        if state.optimizer is not None:
            store.put(key=optim_key(policy=policy, version=state.policy_version), message=state.optimizer)
        if "target" in state.parts:
            store.put(key=target_key(policy=policy, version=state.policy_version), message=state.parts["target"])
        if "critic" in state.parts:
            store.put(key=critic_key(policy=policy, version=run["critic_versions"][policy]),
                      message=state.parts["critic"])
        for part in ("weights", "optim", "target"):   # QMIX's mixer, in the first policy's checkpoint
            if f"mixer_{part}" in state.parts:
                store.put(key=mixer_key(part=part, version=int(run["mixer_version"])),
                          message=state.parts[f"mixer_{part}"])
    parts.sharing.load_state_dict(run["sharing"])
    parts.scaler.load_state_dict(run["scaler"])
    replays = _publish_replays(states=states, parts=parts, replays=run.get("replays", {}))
    extra = any_state.extra
    versions = {policy: int(version) for policy, version in run["versions"].items()}
    slots, slot_seq = _saved_slots(state=any_state, config=parts.config)
    if (notice := resume_notice(state=any_state, current=parts.config.model_dump(mode="json"))) is not None:
        log.warning("%s", notice)
    return MarlessProgress(
        rounds=any_state.round, env_steps=any_state.env_steps, episodes=any_state.episodes,
        policy_version=sum(versions.values()), recent_returns=[float(r) for r in extra.get("recent_returns", [])],
        nonfinite_in_a_row=int(extra.get("nonfinite_in_a_row", 0)), wall_s_before=float(extra.get("wall_s", 0.0)),
        cost_usd_before=float(extra.get("cost_usd", 0.0)), cost_excl_cold_usd_before=extra.get("cost_excl_cold_usd"),
        slot_seq=slot_seq,
        # a rank with no saved slot has never run: with the slots saved it starts at sequence 0, as it would have
        # in the run that was never stopped; without them every rank starts fresh from the resumed round
        slot_seq_base=0 if slots else any_state.round,
        slot_states=slots, versions=versions,
        critic_versions={policy: int(version) for policy, version in run["critic_versions"].items()},
        agent_policy=dict(run["agent_policy"]), learner_invocations=int(run["learner_invocations"]),
        next_actors=int(run["next_actors"]), replays=replays, schedule_env_steps=schedule_horizon(state=any_state),
        mixer_version=int(run.get("mixer_version", 0)))


def _saved_slots(*, state: CheckpointState, config: NimbusConfig) -> tuple[dict[int, Any], dict[int, int]]:
    """Every rank's saved env slot and sequence, when this run restores slots and its envs per actor are the
    checkpoint's; otherwise none (every rank starts fresh episodes from the resumed round)."""
    if state.actors is None or not config.actors.restore_slots:
        return {}, {}
    slots, slot_seq = slots_from_message(message=state.actors)
    saved_envs = {len(slot.meta) for slot in slots.values()}
    if saved_envs != {config.env.num_envs_per_actor}:
        log.warning("the checkpoint's actor slots hold %s envs, this config %d (env.num_envs_per_actor): every "
                    "rank starts fresh episodes", sorted(saved_envs), config.env.num_envs_per_actor)
        return {}, {}
    return slots, slot_seq


def _publish_replays(*, states: dict[str, CheckpointState], parts: MarlessParts,
                     replays: dict[str, list[str]]) -> dict[str, list[str]]:
    """Put the saved replay values back under their keys (``train.checkpoint_replay``); the replays to go on
    with. Without them in the checkpoint the replays refill from the resumed round on."""
    if not parts.config.train.checkpoint_replay:
        return {}
    if not replays:
        log.warning("the checkpoint holds no replay (saved without train.checkpoint_replay): it refills")
        return {}
    saved = {name: message for state in states.values() for name, message in state.parts.items()
             if name.startswith("replay.")}
    missing = [key for keys in replays.values() for key in keys if replay_part(key=key) not in saved]
    if missing:
        raise CheckpointError(f"the checkpoint's replay lacks {', '.join(missing[:4])}")
    for keys in replays.values():
        for key in keys:
            parts.shared.store.put(key=key, message=saved[replay_part(key=key)])
    return {owner: list(keys) for owner, keys in replays.items()}
