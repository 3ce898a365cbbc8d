"""Resume a run from its newest checkpoint (``nimbus train --resume RUN_DIR``).

What comes back: the policy's weights (with the observation normaliser's statistics, which travel with
them), the optimizer's state, the counters (rounds, env steps, episodes, policy version), the window
of recent returns that ``train.target_return`` reads, and the wall time and cost so far, so metrics,
TensorBoard steps, learning-rate schedules and the stopping rule continue where they stopped.

What else comes back depends on ``train.exact_resume``:
* on (sync workflow, MuJoCo and classic-control envs): every actor rank's env slot — its envs mid-episode,
  wrapper counters, random generators, running episode returns (envs/slot_state.py) — and its slot
  sequence, so the resumed rounds are bitwise the rounds the run would have made without stopping
  (RELIABILITY.md P9; tests/integration/test_resume.py);
* off: episodes that were in flight restart as fresh episodes, from seeds derived from the resumed round,
  so two resumes of one checkpoint are identical.
With ``train.checkpoint_replay`` the async workflow's replay buffer and the Nitro scaler's window come back
too (offpolicy/replay_checkpoint.py); without it the buffer refills from ``learning_starts`` and a scaler
starts from its initial decision.

Example::

    state = load_resume_state(path=Path("runs/ppo-cartpole-20261122-041500"))
    check_compatible(state=state, system=system)           # a different network is refused up front
    publish_checkpoint(state=state, system=system)         # weights and optimizer as version v
    progress = progress_from(state=state)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from nimbus.config import parse_config
from nimbus.data.checkpoint import CheckpointState, load_checkpoint
from nimbus.envs.slot_state import slots_from_message
from nimbus.errors import CheckpointError
from nimbus.models.weights import load_model, optim_key, weights_key
from nimbus.onpolicy.system import System
from nimbus.run.build import probe_spaces
from nimbus.types import Progress

MAX_DIFFERENCES_SHOWN = 8


def load_resume_state(*, path: Path) -> CheckpointState:
    """The newest checkpoint that verifies under ``path`` (a run directory, its ``checkpoints/``, or one
    ``ckpt-*`` directory)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"cannot resume from {path}: no such directory")
    return load_checkpoint(path=path)


def check_compatible(*, state: CheckpointState, system: System) -> None:
    """Refuse a checkpoint of another algorithm or network before any worker sees it."""
    saved_algo = state.config.get("algo", {}).get("name")
    if saved_algo != system.config.algo.name:
        raise CheckpointError(f"the checkpoint was trained with algo.name={saved_algo!r}; this config has "
                              f"algo.name={system.config.algo.name!r}")
    saved_env = state.config.get("env", {})
    if state.actors is not None and (saved_env.get("id"), saved_env.get("num_envs_per_actor")) != \
            (system.config.env.id, system.config.env.num_envs_per_actor):
        raise CheckpointError(f"the checkpoint's env slots are {saved_env.get('num_envs_per_actor')} × "
                              f"{saved_env.get('id')} per actor; this config runs {system.config.env.num_envs_per_actor}"
                              f" × {system.config.env.id} (an exact resume needs the same envs)")
    if state.policy_version > 0 and state.optimizer is None:
        raise CheckpointError(f"the checkpoint of policy version {state.policy_version} has no optimizer state")
    model = system.algo.make_model(spaces=system.spaces)
    differences = network_differences(state=state, model=model)
    if differences:
        differences = env_differences(state=state, system=system) + differences
        shown = "; ".join(differences[:MAX_DIFFERENCES_SHOWN]) + (
            f"; and {len(differences) - MAX_DIFFERENCES_SHOWN} more" if len(differences) > MAX_DIFFERENCES_SHOWN else "")
        raise CheckpointError(f"the checkpoint's weights do not fit the network this config builds: {shown}")
    load_model(model=model, message=state.weights)


def network_differences(*, state: CheckpointState, model: torch.nn.Module) -> list[str]:
    """Each parameter whose shape differs between the checkpoint and ``model``, or that only one of them has."""
    built = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    saved = {name[len("param."):]: tuple(array.shape) for name, array in state.weights.arrays.items()
             if name.startswith("param.")}
    return [f"{name}: checkpoint {saved.get(name, 'absent')}, this config {built.get(name, 'absent')}"
            for name in sorted(built.keys() | saved.keys()) if built.get(name) != saved.get(name)]


def env_differences(*, state: CheckpointState, system: System) -> list[str]:
    """The env id and spaces of the checkpoint's run where they differ from this config's."""
    saved_config = parse_config(data=state.config)
    if saved_config.env.id == system.config.env.id and saved_config.env.kwargs == system.config.env.kwargs:
        return []
    found = [f"env.id: checkpoint {saved_config.env.id!r}, this config {system.config.env.id!r}"]
    try:
        saved = probe_spaces(config=saved_config)
    except Exception as exc:  # noqa: BLE001 - the checkpoint's env may not be installed here: say so, go on
        return found + [f"(the checkpoint's env cannot be made here to compare its spaces: {exc})"]
    for name in ("observation", "action"):
        if getattr(saved, name) != getattr(system.spaces, name):
            found.append(f"{name} space: checkpoint {getattr(saved, name)}, this config {getattr(system.spaces, name)}")
    return found


def publish_checkpoint(*, state: CheckpointState, system: System) -> None:
    """Put the checkpoint's weights and optimizer state in the Store as the system's policy's version."""
    system.store.put(key=weights_key(policy=system.policy, version=state.policy_version), message=state.weights)
    if state.optimizer is not None:
        system.store.put(key=optim_key(policy=system.policy, version=state.policy_version), message=state.optimizer)


def progress_from(*, state: CheckpointState) -> Progress:
    """The counters to continue from; with the actors' env slots (``train.exact_resume``) each rank's first
    request rebuilds its envs exactly, otherwise envs start fresh episodes from seeds of the resumed round."""
    extra = state.extra
    slots, slot_seq = slots_from_message(message=state.actors) if state.actors is not None else ({}, {})
    return Progress(rounds=state.round, env_steps=state.env_steps, episodes=state.episodes,
                    policy_version=state.policy_version,
                    recent_returns=[float(r) for r in extra.get("recent_returns", [])],
                    nonfinite_in_a_row=int(extra.get("nonfinite_in_a_row", 0)),
                    wall_s_before=float(extra.get("wall_s", 0.0)), cost_usd_before=float(extra.get("cost_usd", 0.0)),
                    slot_seq_base=state.round, slot_seq=slot_seq, slot_states=dict(slots), restore_slots=slots,
                    schedule_env_steps=schedule_horizon(state=state))


def schedule_horizon(*, state: CheckpointState) -> int | None:
    """The env steps the run's schedules (learning rate, clip, ε) anneal over: its first session's
    ``train.total_env_steps``, kept through every resume, so raising it on ``--resume`` trains longer without
    re-scaling the schedules of the run it continues."""
    saved = state.extra.get("schedule_env_steps") or state.config.get("train", {}).get("total_env_steps")
    return int(saved) if isinstance(saved, (int, float)) and saved > 0 else None


def config_changes(*, saved: dict, current: dict, prefix: str = "") -> list[str]:
    """``key.path: old → new`` for every config value that differs between the checkpoint's run and this one."""
    changes = []
    for key in sorted(saved.keys() | current.keys()):
        old, new = saved.get(key, "absent"), current.get(key, "absent")
        if isinstance(old, dict) and isinstance(new, dict):
            changes += config_changes(saved=old, current=new, prefix=f"{prefix}{key}.")
        elif old != new:
            changes.append(f"{prefix}{key}: {old!r} → {new!r}")
    return changes


def resume_notice(*, state: CheckpointState, current: dict) -> str | None:
    """What a resume changes (a warning): the config keys whose values differ from the checkpoint's run, and
    the horizon the schedules keep; None when nothing changed."""
    changes = config_changes(saved=state.config, current=current)
    if not changes:
        return None
    shown = "; ".join(changes[:MAX_DIFFERENCES_SHOWN]) + (
        f"; and {len(changes) - MAX_DIFFERENCES_SHOWN} more" if len(changes) > MAX_DIFFERENCES_SHOWN else "")
    horizon = schedule_horizon(state=state)
    anchored = f" (learning-rate, clip and ε schedules stay anchored to the run's original {horizon} env steps: " \
               f"a linear schedule has reached its end there)" if horizon is not None and \
        current.get("train", {}).get("total_env_steps") != horizon else ""
    return f"resuming with a config that differs from the checkpoint's: {shown}{anchored}"


def progress_extra(*, progress: Progress, total_env_steps: int) -> dict:
    """What ``progress_from`` needs besides the counters (the checkpoint manifest's ``extra``); ``total_env_steps``:
    this session's, the schedules' horizon unless a resume restored the run's original one."""
    last = progress.last_row
    return {"recent_return_mean": float(np.mean(progress.recent_returns)) if progress.recent_returns else None,
            "recent_returns": [float(r) for r in progress.recent_returns],
            "nonfinite_in_a_row": progress.nonfinite_in_a_row,
            "schedule_env_steps": progress.schedule_env_steps or total_env_steps,
            "wall_s": last.wall_s if last is not None else progress.wall_s_before,
            "cost_usd": last.cost_usd if last is not None else progress.cost_usd_before}
