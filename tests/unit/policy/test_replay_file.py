"""policy/replay_checkpoint.py's file under a full disk: no temporary file left, one CheckpointError that
says so, the previous replay file kept."""

from __future__ import annotations

import builtins
from pathlib import Path

import numpy as np
import pytest

from nimbus.data.codec import Message
from nimbus.errors import CheckpointError
from nimbus.policy import replay_checkpoint
from nimbus.policy.replay_checkpoint import save_replay


def test_a_full_disk_leaves_no_temp_file_and_keeps_the_previous(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    message = Message(arrays={"col.obs": np.zeros((4, 2), np.float32)})
    save_replay(directory=tmp_path, round=2, message=message)
    real_open = builtins.open

    class FullDisk:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            self.handle.write(data[:3])
            raise OSError(28, "No space left on device")

    def opening(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return FullDisk(handle) if "w" in mode and Path(path).name.startswith(".tmp-replay-") else handle

    monkeypatch.setattr(replay_checkpoint, "open", opening, raising=False)
    with pytest.raises(CheckpointError, match=r"replay file of round 4 not written to .*No space left on device "
                                              r"\(disk full\); its temporary file was removed"):
        save_replay(directory=tmp_path, round=4, message=message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay-000002.safetensors"]
