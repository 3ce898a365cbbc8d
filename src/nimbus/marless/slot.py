"""A multi-agent actor rank's env slot: its envs mid-episode, kept by a warm worker and, with
``actors.restore_slots``, carried as data so that another worker can go on with the same episodes.

A warm worker keeps each rank's slot in ``context.cache["marless_slots"]``. The driver sends ``slot_seq``; a cached
slot whose sequence, env count or kind (centralised or not) does not match is not used. In its place the
worker restores the state the request carries (the rank's newest, from its previous result), or, when there is
none, builds fresh envs seeded from (seed, rank, slot_seq): unfinished episodes are then dropped, never counted
twice. Restoring makes a run independent of which worker serves a rank, so a seeded run repeats.

A slot state travels as envs/slot_state.py's ``SlotState``: arrays ``slot.obs.<env>.<agent>`` (the live
agents' current observations), ``slot.mask.<env>.<agent>`` (their action masks, for an env that gives them),
``slot.lengths`` and ``slot.env.<env>.<key>`` (envs/parallel_snapshot.py); per env, meta holds the env's
snapshot and the running per-agent returns. The global state is recomputed from the
restored env. Nothing is pickled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nimbus.envs.masks import masks_from
from nimbus.envs.parallel import global_state, make_parallel_env
from nimbus.envs.parallel_snapshot import capture_parallel, restore_parallel
from nimbus.envs.slot_state import PREFIX, SlotState, check_env_count, env_arrays
from nimbus.envs.snapshot import SnapshotUnsupported
from nimbus.roles.actor import derive_seed

log = logging.getLogger(__name__)
_warned: set[str] = set()     # env ids already warned about in this worker


@dataclass
class MultiAgentSlot:
    envs: list[Any]
    obs: list[dict[str, np.ndarray]]     # per env: the live agents' current observations
    states: list[np.ndarray] | None      # per env: the current global state (centralised algorithms)
    seq: int
    returns: list[dict[str, float]]      # per env: running episode return per agent
    lengths: np.ndarray
    masks: list[dict[str, np.ndarray]] = field(default_factory=list)   # per env: the live agents' action masks
    masked: frozenset[str] = frozenset()   # the agents whose env gives action masks (envs/masks.py)


def env_slot(*, cache: dict[str, Any], req: Any, centralised: bool, restore: SlotState | None) -> MultiAgentSlot:
    """The rank's slot for this request: the cached one if it is current, else ``restore``'s, else fresh envs."""
    slots: dict[int, MultiAgentSlot] = cache["marless_slots"]
    slot = slots.get(req.actor_rank)
    if slot is not None and slot.seq == req.slot_seq and len(slot.envs) == req.num_envs \
            and (slot.states is not None) == centralised:
        return slot
    if slot is not None:
        for env in slot.envs:
            env.close()
    base = derive_seed(req.seed, req.actor_rank, req.slot_seq)
    envs = [make_parallel_env(env_id=req.env_id, seed=(base + i) % (2**31), kwargs=req.env_kwargs,
                              imports=req.env_imports) for i in range(req.num_envs)]
    resets = [env.reset() for env in envs]
    slot = MultiAgentSlot(envs=envs, obs=[dict(obs) for obs, _ in resets], states=None, seq=req.slot_seq,
                          returns=[dict.fromkeys(env.possible_agents, 0.0) for env in envs],
                          lengths=np.zeros(req.num_envs, dtype=np.int64),
                          masks=[masks_from(infos=infos) for _, infos in resets],
                          masked=frozenset(envs[0].mask_agents or ()))
    if restore is not None:
        restore_ma_slot(slot=slot, state=restore)
    if centralised:
        slot.states = [global_state(env=env) for env in envs]
    slots[req.actor_rank] = slot
    return slot


def capture_ma_slot(*, slot: MultiAgentSlot) -> SlotState | None:
    """The slot as data, as the next fragment will find it; None for an env that cannot be snapshotted."""
    arrays = {f"{PREFIX}lengths": np.array(slot.lengths)}
    meta = []
    try:
        for e, env in enumerate(slot.envs):
            env_arrays, env_meta = capture_parallel(env=env)
            arrays.update({f"{PREFIX}env.{e}.{key}": value for key, value in env_arrays.items()})
            arrays.update({f"{PREFIX}obs.{e}.{agent}": np.array(obs) for agent, obs in slot.obs[e].items()})
            arrays.update({f"{PREFIX}mask.{e}.{agent}": np.array(mask) for agent, mask in slot.masks[e].items()})
            meta.append({"env": env_meta, "returns": dict(slot.returns[e]), "live": list(slot.obs[e])})
    except SnapshotUnsupported as exc:
        if str(exc) not in _warned:
            _warned.add(str(exc))
            log.warning("actors.restore_slots: %s; a worker without a rank's slot starts fresh episodes", exc)
        return None
    return SlotState(arrays=arrays, meta=meta)


def restore_ma_slot(*, slot: MultiAgentSlot, state: SlotState) -> None:
    """Put ``state`` into ``slot`` (freshly built envs of the same count): the rank's episodes go on."""
    check_env_count(state=state, num_envs=len(slot.envs))
    for e, env in enumerate(slot.envs):
        restore_parallel(env=env, arrays=env_arrays(state=state, index=e), meta=state.meta[e]["env"])
        slot.obs[e] = {agent: np.array(state.arrays[f"{PREFIX}obs.{e}.{agent}"]) for agent in state.meta[e]["live"]}
        slot.masks[e] = {agent: np.array(state.arrays[f"{PREFIX}mask.{e}.{agent}"], dtype=bool)
                         for agent in state.meta[e]["live"] if f"{PREFIX}mask.{e}.{agent}" in state.arrays}
        slot.returns[e] = {agent: float(value) for agent, value in state.meta[e]["returns"].items()}
    slot.lengths = np.array(state.arrays[f"{PREFIX}lengths"], dtype=np.int64)
