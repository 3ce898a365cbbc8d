"""Resume a run from its newest checkpoint (``nimbus train --resume RUN_DIR``): what every workflow shares.

What comes back: the policy's weights (with the observation normaliser's statistics, which travel with
them), the optimizer's state, the counters (rounds, env steps, episodes, policy version), the window
of recent returns that ``train.target_return`` reads, and the wall time and cost so far, so metrics,
TensorBoard steps, learning-rate schedules and the stopping rule continue where they stopped.

What else comes back depends on ``train.exact_resume``:
* on (onpolicy workflow, MuJoCo and classic-control envs): every actor rank's env slot — its envs mid-episode,
  wrapper counters, random generators, running episode returns (envs/slot_state.py) — and its slot
  sequence, so the resumed rounds are bitwise the rounds the run would have made without stopping
  (P9, docs/reliability.md; tests/integration/test_resume.py);
* off: episodes that were in flight restart as fresh episodes, from seeds derived from the resumed round,
  so two resumes of one checkpoint are identical.
With ``train.checkpoint_replay`` the offpolicy workflow's replay buffer and the Nitro scaler's window come back
too (policy/replay_checkpoint.py); without it the buffer refills from ``learning_starts`` and a scaler
starts from its initial decision.

This module holds the parts every workflow uses (finding the checkpoint, the manifest's ``extra``, the
schedules' horizon, the notice of what a resume changes); a one-policy run's checks and publishing are in
policy/lifecycle.py, MARLess's in marless/checkpoint.py.

Example::

    state = load_resume_state(path=Path("runs/ppo-cartpole-20261122-041500"))
    extra = progress_extra(progress=progress, total_env_steps=config.train.total_env_steps)   # saved with it
    notice = resume_notice(state=state, current=config.model_dump(mode="json"))   # None: nothing changed
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nimbus.config.renamed import renamed_config
from nimbus.data.checkpoint import CheckpointState, load_checkpoint
from nimbus.errors import CheckpointError

if TYPE_CHECKING:
    from nimbus.types import Progress

MAX_DIFFERENCES_SHOWN = 8


def load_resume_state(*, path: Path) -> CheckpointState:
    """The newest checkpoint that verifies under ``path`` (a run directory, its ``checkpoints/``, or one
    ``ckpt-*`` directory)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"cannot resume from {path}: no such directory")
    return load_checkpoint(path=path)


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
    changes = config_changes(saved=renamed_config(data=state.config, warn=False), current=current)   # old names too
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
            "cost_usd": last.cost_usd if last is not None else progress.cost_usd_before,
            "cost_excl_cold_usd": last.extras.get("cost_excl_cold_usd", progress.cost_excl_cold_usd_before)
            if last is not None else progress.cost_excl_cold_usd_before}   # the run loop's figure (run/rounds.py)
