"""Read experiment trackers' own local stores back, for tests: W&B's offline ``.wandb`` files (a LevelDB-style log
of protobuf Records), MLflow's store through its client, TensorBoard's event files through its accumulator.

W&B's service writes the ``.wandb`` file from its own process: ``run.finish()`` can return before the last records
are on disk, so ``wandb_records`` waits (bounded) until each run file ends with its ``exit`` record.
"""

from __future__ import annotations

import glob
import json
import struct
import time
from pathlib import Path
from typing import Any

SETTLE_S = 30.0


def _file_records(path: Path) -> list[Any]:
    """The protobuf Records of one run file (32 KiB blocks, 7-byte chunk headers; the file header skipped)."""
    from wandb.proto import wandb_internal_pb2 as pb

    records = []
    data, pos, pending = Path(path).read_bytes(), 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:   # block padding
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_records(run_dir: Path) -> list[Any]:
    """Every Record of the W&B offline runs under ``run_dir/wandb``, once each run file holds its exit record."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        files = [_file_records(Path(p)) for p in sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" /
                                                                       "run-*.wandb")))]
        settled = all(any(r.WhichOneof("record_type") == "exit" for r in records) for records in files)
        if (files and settled) or time.monotonic() > deadline:
            return [record for records in files for record in records]
        time.sleep(0.2)


def wandb_history(run_dir: Path) -> dict[int, dict[str, float]]:
    """step → the scalars logged at it (W&B's own ``_step``, ``_runtime``... left out)."""
    history: dict[int, dict[str, float]] = {}
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history.setdefault(record.history.step.num, {}).update(
                {k: v for k, v in items.items() if not k.startswith("_")})
    return history


def wandb_config(run_dir: Path) -> dict[str, Any]:
    """The run's config as its first run record holds it (W&B's own ``_wandb`` key left out)."""
    run = next(r.run for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "run")
    return {item.key: json.loads(item.value_json) for item in run.config.update if item.key != "_wandb"}


def wandb_saved_files(run_dir: Path) -> set[str]:
    """The files the runs saved (``run.save``), by their path in the run."""
    return {item.path for record in wandb_records(run_dir) if record.WhichOneof("record_type") == "files"
            for item in record.files.files}


def wandb_exit_codes(run_dir: Path) -> list[int]:
    return [r.exit.exit_code for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "exit"]
