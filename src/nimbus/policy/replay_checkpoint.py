"""``train.checkpoint_replay``: the replay buffer and the scaler's window, saved beside each checkpoint.

An off-policy run resumed without its replay buffer starts again from ``learning_starts`` with an empty
buffer; a Nitro scaler without its window scores the first rounds on no history. With the flag on, each
checkpoint ``ckpt-000025/`` gets a sibling ``replay-000025.safetensors`` (a plain safetensors file: the
codec frame's body, uncompressed, header in ``__metadata__["nimbus"]``; never pickle) holding:

* ``col.<key>`` / ``meta.<name>``: every row the ARTOS buffer holds, oldest first (``Buffer.held_rows``),
  with its actor rank, policy version, ingest sequence number and read flag;
* ``replay.<name>``: the replay strategy's state (PER priorities and max priority, FIFO position, IMPACT's
  held batches);
* ``pacer``: the offpolicy workflow's counters (rows ingested, gradient steps started, rows taken), so the
  replay ratio and back-pressure continue where they stopped;
* ``scaler.<name>``: the actor scaler's state when it keeps one (policy/scaling.py ``StatefulScaler``: Nitro's
  window, skipped probes, budget flag), in either workflow.

The file is written under a temporary name, fsynced and renamed before the checkpoint itself, and the
checkpoint's manifest names it with its SHA-256 (``extra["replay_file"]``, ``extra["replay_sha256"]``), so
a resume uses only a replay file that matches its checkpoint. Files without a checkpoint are pruned.

Example::

    extra = save_replay(directory=run_dir / "checkpoints", round=25, message=replay_message(...))
    message = load_replay(checkpoint_dir=run_dir / "checkpoints", extra=state.extra)   # None if not saved
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from nimbus.data.buffer import Buffer
from nimbus.data.checkpoint import DISK_FULL
from nimbus.data.codec import MAGIC, PREFIX, VERSION, Message, decode, encode
from nimbus.errors import CheckpointError
from nimbus.policy.scaling import StatefulScaler

FILE_KEY, SHA_KEY = "replay_file", "replay_sha256"
PACER_FIELDS = ("rows_ingested", "steps_started", "rows_taken")


def _prefixed(prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"{prefix}.{key}": np.ascontiguousarray(value) for key, value in arrays.items()}


def _section(prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    start = len(prefix) + 1
    return {key[start:]: value for key, value in arrays.items() if key.startswith(prefix + ".")}


def replay_message(*, scaler: Any, buffer: Buffer | None = None, replay: Any = None,
                   pacer: Any = None) -> Message:
    """What ``checkpoint_replay`` keeps: the scaler's state, and for the offpolicy workflow the buffer's rows,
    the replay strategy's state and the pacer's counters."""
    arrays: dict[str, np.ndarray] = {}
    if isinstance(scaler, StatefulScaler):       # Nitro keeps a window; fixed/max/hydrozoa have no state
        arrays.update(_prefixed("scaler", scaler.state_dict()))
    if buffer is not None:
        columns, meta = buffer.held_rows()
        arrays.update(_prefixed("col", columns))
        arrays.update(_prefixed("meta", meta))
        arrays.update(_prefixed("replay", replay.state_dict()))
        arrays["pacer"] = np.array([getattr(pacer, name) for name in PACER_FIELDS], dtype=np.int64)
    header = {"rows": buffer.size_rows, "capacity_rows": buffer.capacity_rows} if buffer is not None else {}
    return Message(header=header, arrays=arrays)


def restore_scaler(*, message: Message, scaler: Any) -> None:
    state = _section("scaler", message.arrays)
    if state:
        scaler.load_state_dict(state)


def restore_replay(*, message: Message, buffer: Buffer, replay: Any, pacer: Any) -> None:
    """Refill an empty buffer, its replay strategy and the pacer from ``replay_message``'s arrays."""
    if "pacer" not in message.arrays:
        return                                   # saved by the onpolicy workflow: scaler only
    if message.header["capacity_rows"] != buffer.capacity_rows:
        raise CheckpointError(f"the checkpoint's replay buffer holds {message.header['capacity_rows']} rows; this "
                              f"config builds {buffer.capacity_rows} (keep the buffer size to resume its replay)")
    buffer.restore_rows(columns=_section("col", message.arrays), meta=_section("meta", message.arrays))
    replay.load_state_dict(_section("replay", message.arrays))
    for name, value in zip(PACER_FIELDS, message.arrays["pacer"]):
        setattr(pacer, name, int(value))


def save_replay(*, directory: Path, round: int, message: Message) -> dict[str, str]:
    """Write ``replay-<round>.safetensors`` atomically; returns the manifest entries that name it."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"replay-{round:06d}.safetensors"
    data = encode(message, compress_min_bytes=None)[PREFIX.size:]   # the frame's body: a plain safetensors file
    tmp = directory / f".tmp-{name}"
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, directory / name)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno in DISK_FULL:   # the checkpoint is not written either: the previous pair is kept
            raise CheckpointError(f"replay file of round {round} not written to {directory}: {exc.strerror} "
                                  f"(disk full); its temporary file was removed and the previous checkpoint is "
                                  f"kept") from None
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return {FILE_KEY: name, SHA_KEY: hashlib.sha256(data).hexdigest()}


def prune_replays(*, directory: Path, keep: str) -> None:
    """Delete replay files whose checkpoint is gone (``keep``: the file just written)."""
    rounds = {p.name.removeprefix("ckpt-") for p in directory.glob("ckpt-*")}
    for path in directory.glob("replay-*.safetensors"):
        if path.name != keep and path.name.removeprefix("replay-").removesuffix(".safetensors") not in rounds:
            path.unlink(missing_ok=True)


def checkpoints_dir(*, path: Path) -> Path:
    """The ``checkpoints/`` directory of a run directory, of itself, or of one ``ckpt-*`` directory."""
    path = Path(path)
    if (path / "checkpoints").is_dir():
        return path / "checkpoints"
    return path.parent if path.name.startswith("ckpt-") else path


def load_replay(*, checkpoint_dir: Path, extra: dict[str, Any]) -> Message | None:
    """The replay file the checkpoint names, verified; None if the checkpoint was saved without one."""
    if FILE_KEY not in extra:
        return None
    path = checkpoint_dir / extra[FILE_KEY]
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path}: the checkpoint names this replay file but it cannot be read: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != extra[SHA_KEY]:
        raise CheckpointError(f"{path}: SHA-256 mismatch with the checkpoint's manifest (corrupt or from another "
                              "checkpoint)")
    return decode(PREFIX.pack(MAGIC, VERSION, 0, 0) + data, copy=True)
