"""An actor rank's env slot as data: what exact resume (P9, docs/reliability.md) carries from one run to the next.

With ``train.exact_resume`` every actor result also carries its slot as the next fragment will find it:
the current observations, the running episode returns and lengths, and each env's snapshot
(envs/snapshot.py: simulator state, wrapper counters, random generators). The driver keeps the newest
per rank and a checkpoint writes them to ``actors.safetensors``; a resumed run sends each rank's state
with its first request, and the actor rebuilds the slot from it instead of starting fresh episodes.

Arrays are named ``slot.obs``, ``slot.episode_returns``, ``slot.episode_lengths`` and
``slot.env.<i>.<key>``; the JSON part (per-env wrapper counters and generator states) travels in the
header under ``SLOT_META``. Nothing is pickled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nimbus.data.codec import Message
from nimbus.envs.snapshot import capture, restore

SLOT_META = "slot_meta"
PREFIX = "slot."


@dataclass(frozen=True)
class SlotState:
    arrays: dict[str, np.ndarray]   # every name starts with "slot."
    meta: list[dict[str, Any]]      # one per env


def capture_slot(*, slot: Any) -> SlotState:
    arrays = {f"{PREFIX}obs": np.array(slot.obs), f"{PREFIX}episode_returns": np.array(slot.episode_returns),
              f"{PREFIX}episode_lengths": np.array(slot.episode_lengths)}
    meta = []
    for i, env in enumerate(slot.envs):
        env_arrays, env_meta = capture(env=env)
        arrays.update({f"{PREFIX}env.{i}.{key}": value for key, value in env_arrays.items()})
        meta.append(env_meta)
    return SlotState(arrays=arrays, meta=meta)


def restore_slot(*, slot: Any, state: SlotState) -> None:
    check_env_count(state=state, num_envs=len(slot.envs))
    for i, env in enumerate(slot.envs):
        restore(env=env, arrays=env_arrays(state=state, index=i), meta=state.meta[i])
    slot.obs = np.array(state.arrays[f"{PREFIX}obs"])
    slot.episode_returns = np.array(state.arrays[f"{PREFIX}episode_returns"])
    slot.episode_lengths = np.array(state.arrays[f"{PREFIX}episode_lengths"])


def check_env_count(*, state: SlotState, num_envs: int) -> None:
    if len(state.meta) != num_envs:
        raise ValueError(f"the saved slot has {len(state.meta)} envs, this one {num_envs} "
                         "(env.num_envs_per_actor changed?)")


def env_arrays(*, state: SlotState, index: int) -> dict[str, np.ndarray]:
    """Env ``index``'s snapshot arrays, their ``slot.env.<index>.`` prefix taken off."""
    head = f"{PREFIX}env.{index}."
    return {name[len(head):]: value for name, value in state.arrays.items() if name.startswith(head)}


def slot_state_from(*, message: Message) -> SlotState | None:
    """The slot state a message carries (a request to restore, or a result), or None."""
    if SLOT_META not in message.header:
        return None
    return SlotState(arrays={k: v for k, v in message.arrays.items() if k.startswith(PREFIX)},
                     meta=list(message.header[SLOT_META]))


def pop_slot_state(*, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> SlotState | None:
    """Take a result's slot state out of it (the rest goes to the buffer): copies, the result's views die."""
    meta = header.pop(SLOT_META, None)
    names = [name for name in arrays if name.startswith(PREFIX)]
    state = {name: np.array(arrays.pop(name)) for name in names}
    return None if meta is None else SlotState(arrays=state, meta=list(meta))


def slots_to_message(*, states: dict[int, SlotState], slot_seq: dict[int, int]) -> Message:
    """Every rank's newest slot, for a checkpoint (``rank.<r>.`` before each array name)."""
    arrays = {f"rank.{rank}.{name}": value for rank, state in states.items() for name, value in state.arrays.items()}
    return Message(header={"meta": {str(rank): state.meta for rank, state in states.items()},
                           "slot_seq": {str(rank): seq for rank, seq in slot_seq.items()}}, arrays=arrays)


def slots_from_message(*, message: Message) -> tuple[dict[int, SlotState], dict[int, int]]:
    states = {}
    for rank_text, meta in message.header["meta"].items():
        head = f"rank.{rank_text}."
        states[int(rank_text)] = SlotState(
            arrays={name[len(head):]: value for name, value in message.arrays.items() if name.startswith(head)},
            meta=list(meta))
    return states, {int(rank): int(seq) for rank, seq in message.header["slot_seq"].items()}
