"""Crash-consistent checkpoints: plain safetensors files + manifest.json, temp dir, fsync, rename, keep N.

Layout of ``<run>/checkpoints/``::

    ckpt-000025/ weights.safetensors  optimizer.safetensors  [actors.safetensors]  [<part>.safetensors]
                 manifest.json
    ckpt-000050/ ...

A checkpoint directory is written under a temporary name, every file fsynced, then renamed into place
and the parent directory fsynced, so a crash (or SIGKILL) at any point leaves either the previous
checkpoints or a complete new one — never a half-written one under a final name. The manifest holds
the format version, a SHA-256 of each file, and the counters needed to resume. Loading verifies the
hashes; a corrupt or truncated checkpoint is skipped with a warning in favour of the previous one.
The files are plain safetensors files that the safetensors library opens without nimbus (tensors named
after the model's state_dict keys, data/ckptfile.py); format version 1's framed files still load.

Example::

    ckpt = Checkpointer(directory=run_dir / "checkpoints", keep=3)
    ckpt.save(state=CheckpointState(...))
    state = ckpt.load_latest()
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from nimbus.data.ckptfile import read_message, write_bytes
from nimbus.data.codec import Message
from nimbus.errors import CheckpointError, CodecError

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: codec frames as files (older nimbus); 2: plain safetensors files
MANIFEST_FIELDS = ("policy_version", "round", "env_steps", "episodes", "config", "extra")
MANIFEST_TYPES = {"files": dict, "policy_version": int, "round": int, "env_steps": int, "episodes": int,
                  "config": dict}   # what a manifest must hold (``extra`` is optional: older manifests lack it)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
RESERVED_FILES = ("weights.safetensors", "optimizer.safetensors", "actors.safetensors")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointState:
    weights: Message
    optimizer: Message | None
    policy_version: int
    round: int
    env_steps: int
    episodes: int
    config: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    actors: Message | None = None   # train.exact_resume: every actor rank's env slot (envs/slot_state.py)
    parts: dict[str, Message] = field(default_factory=dict)   # more networks of the policy: MARL's critic, target


def _write_file(*, path: Path, data: bytes) -> str:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Checkpointer:
    def __init__(self, *, directory: Path, keep: int = 3) -> None:
        self.directory = Path(directory)
        self.keep = keep
        self.directory.mkdir(parents=True, exist_ok=True)

    def save(self, *, state: CheckpointState) -> Path:
        """Write atomically; returns the final directory. On failure nothing new is left behind."""
        final = self.directory / f"ckpt-{state.round:06d}"
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-ckpt-", dir=self.directory))
        try:
            files = {"weights.safetensors": _write_file(path=tmp / "weights.safetensors",
                                                        data=write_bytes(message=state.weights, weights=True))}
            for name, message in (("optimizer", state.optimizer), ("actors", state.actors), *state.parts.items()):
                if message is not None:
                    files[f"{name}.safetensors"] = _write_file(path=tmp / f"{name}.safetensors",
                                                               data=write_bytes(message=message, weights=False))
            manifest = {"format_version": FORMAT_VERSION, "files": files,
                        **{f.name: getattr(state, f.name) for f in fields(state) if f.name in MANIFEST_FIELDS}}
            _write_file(path=tmp / "manifest.json", data=json.dumps(manifest, indent=1).encode())
            _fsync_dir(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync_dir(self.directory)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in DISK_FULL:
                raise CheckpointError(self._disk_full(round=state.round, exc=exc)) from None
            raise
        self._prune()
        return final

    def _disk_full(self, *, round: int, exc: OSError) -> str:
        kept = self.list()
        previous = f"the previous checkpoint {kept[-1]} is kept" if kept else "there is no previous checkpoint"
        return (f"checkpoint of round {round} not written to {self.directory}: {exc.strerror or exc} (disk full); "
                f"its temporary files were removed and {previous}")

    def _prune(self) -> None:
        for stale in self.list()[:-self.keep]:
            shutil.rmtree(stale, ignore_errors=True)
        for tmp in self.directory.glob(".tmp-ckpt-*"):
            shutil.rmtree(tmp, ignore_errors=True)

    def list(self) -> list[Path]:
        """Complete checkpoint directories, oldest first: by the round in the name, never by the name itself
        (``ckpt-1000000`` comes after ``ckpt-999999``)."""
        return sorted((p for p in self.directory.glob("ckpt-*") if p.is_dir() and _round_of(p) is not None),
                      key=_round_of)

    def load_latest(self) -> CheckpointState:
        """The newest checkpoint that verifies; earlier ones are tried if the newest is corrupt."""
        candidates = self.list()
        if not candidates:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        for path in reversed(candidates):
            try:
                return load_checkpoint(path=path)
            except CheckpointError as exc:
                if "format version" in str(exc):
                    raise
                log.warning("checkpoint %s is unusable (%s); trying the previous one", path, exc)
        raise CheckpointError(f"no checkpoint in {self.directory} verifies")


def _round_of(path: Path) -> int | None:
    """The round of a ``ckpt-<round>`` directory; None for any other name."""
    suffix = path.name.removeprefix("ckpt-")
    return int(suffix) if suffix.isdigit() else None


def saved_policies(*, run_dir: Path) -> list[str]:
    """The policies of a run of several (``policies/<name>/checkpoints``: members, or a multi-agent run's
    policies), sorted; empty for a run of one policy."""
    policies = Path(run_dir) / "policies"
    return sorted(p.name for p in policies.iterdir() if (p / "checkpoints").is_dir()) if policies.is_dir() else []


def load_checkpoint(*, path: Path) -> CheckpointState:
    """Load and verify one checkpoint directory (or a ``checkpoints/`` dir: its latest)."""
    path = Path(path)
    if (path / "checkpoints").is_dir():
        path = path / "checkpoints"
    if not (path / "manifest.json").exists() and any(path.glob("ckpt-*")):
        return Checkpointer(directory=path).load_latest()
    manifest = _read_manifest(path=path)
    messages: dict[str, Message] = {}
    for name, digest in manifest["files"].items():
        try:
            data = (path / name).read_bytes()
        except OSError as exc:
            raise CheckpointError(f"{path / name}: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise CheckpointError(f"{path / name}: SHA-256 mismatch (corrupt or truncated)")
        try:  # safetensors or a codec frame, nothing else: a planted pickle is refused uninterpreted (P11)
            messages[name] = read_message(data=data, weights=name == "weights.safetensors")
        except CodecError as exc:
            raise CheckpointError(f"{path / name}: not a nimbus checkpoint file, refused: {exc}") from None
    return CheckpointState(weights=messages["weights.safetensors"], optimizer=messages.get("optimizer.safetensors"),
                           policy_version=manifest["policy_version"], round=manifest["round"],
                           env_steps=manifest["env_steps"], episodes=manifest["episodes"],
                           config=manifest["config"], extra=manifest.get("extra", {}),
                           actors=messages.get("actors.safetensors"),
                           parts={name.removesuffix(".safetensors"): message for name, message in messages.items()
                                  if name not in RESERVED_FILES})


def _read_manifest(*, path: Path) -> dict[str, Any]:
    """The manifest of one checkpoint directory, checked for the keys and types loading needs: anything else is
    a CheckpointError (so ``load_latest`` falls back), an unknown format version one that names both versions."""
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: manifest.json unreadable: {exc}") from exc
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{path}: manifest.json is not a JSON object")
    found = manifest.get("format_version")
    if found not in READABLE_VERSIONS:
        raise CheckpointError(f"{path}: checkpoint format version {found} is not supported by this nimbus "
                              f"(it reads format version {' and '.join(map(str, READABLE_VERSIONS))})")
    for key, kind in MANIFEST_TYPES.items():
        if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool):
            raise CheckpointError(f"{path}: manifest.json has no valid {key!r} "
                                  f"(expected {kind.__name__}, found {type(manifest.get(key)).__name__})")
    if not isinstance(manifest.get("extra", {}), dict):
        raise CheckpointError(f"{path}: manifest.json's 'extra' is not an object")
    files = manifest["files"]
    if "weights.safetensors" not in files or not all(isinstance(d, str) for d in files.values()) \
            or any(Path(name).name != name for name in files):
        raise CheckpointError(f"{path}: manifest.json's 'files' must name weights.safetensors and give each "
                              f"file (a plain name) a SHA-256")
    return manifest
