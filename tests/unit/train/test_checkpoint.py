import json
from pathlib import Path

import numpy as np
import pytest

from nimbus.data.codec import Message
from nimbus.errors import CheckpointError
from nimbus.train import checkpoint as ckpt_mod
from nimbus.train.checkpoint import Checkpointer, CheckpointState, load_checkpoint


def state(round_: int) -> CheckpointState:
    weights = Message(header={"policy_version": round_}, arrays={"param.w": np.full((3, 2), round_, np.float32)})
    return CheckpointState(weights=weights, optimizer=None, policy_version=round_, round=round_, env_steps=10 * round_,
                           episodes=round_, config={"name": "t"})


def test_save_load_round_trip(tmp_path: Path) -> None:
    ckpt = Checkpointer(directory=tmp_path, keep=3)
    ckpt.save(state=state(1))
    loaded = ckpt.load_latest()
    assert loaded.policy_version == 1 and loaded.env_steps == 10
    np.testing.assert_array_equal(loaded.weights.arrays["param.w"], np.full((3, 2), 1, np.float32))


def test_keeps_last_n(tmp_path: Path) -> None:
    ckpt = Checkpointer(directory=tmp_path, keep=2)
    for r in range(5):
        ckpt.save(state=state(r))
    assert [p.name for p in ckpt.list()] == ["ckpt-000003", "ckpt-000004"]


def test_corrupt_latest_falls_back_to_previous(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ckpt = Checkpointer(directory=tmp_path, keep=3)
    ckpt.save(state=state(1))
    newest = ckpt.save(state=state(2))
    weights = newest / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-7])  # truncated
    assert ckpt.load_latest().policy_version == 1
    assert "unusable" in caplog.text


def test_incompatible_format_version_names_both(tmp_path: Path) -> None:
    path = Checkpointer(directory=tmp_path).save(state=state(1))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["format_version"] = 99
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"format version 99.*format version 1"):
        load_checkpoint(path=path)


def test_failed_write_leaves_previous_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = Checkpointer(directory=tmp_path)
    ckpt.save(state=state(1))
    real = ckpt_mod._write_file

    def disk_full(*, path: Path, data: bytes) -> str:
        if path.name == "manifest.json":
            raise OSError(28, "No space left on device")
        return real(path=path, data=data)

    monkeypatch.setattr(ckpt_mod, "_write_file", disk_full)
    with pytest.raises(OSError, match="No space"):
        ckpt.save(state=state(2))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-000001"]
    assert ckpt.load_latest().policy_version == 1


def test_kill_during_write_keeps_a_verified_checkpoint(tmp_path: Path) -> None:
    """P8: SIGKILL in the middle of writing a checkpoint; the next load finds a verified one."""
    import subprocess
    import sys
    Checkpointer(directory=tmp_path).save(state=state(1))
    script = f"""
import os, signal
import numpy as np
from pathlib import Path
from nimbus.train import checkpoint as c
from nimbus.data.codec import Message
real = c._write_file
def dying(*, path, data):
    if path.name == "optimizer.safetensors":
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path=path, data=data)
c._write_file = dying
w = Message(arrays={{"param.w": np.zeros(4, np.float32)}})
c.Checkpointer(directory=Path({str(tmp_path)!r})).save(state=c.CheckpointState(
    weights=w, optimizer=w, policy_version=2, round=2, env_steps=0, episodes=0, config={{}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9
    assert Checkpointer(directory=tmp_path).load_latest().policy_version == 1


def test_more_networks_are_their_own_files_and_come_back_by_name(tmp_path: Path) -> None:
    """MARL's critic and target (train/marl_checkpoint.py): ``parts`` files beside the weights, in the
    manifest's hashes, loaded under the same names; a checkpoint without them loads with none."""
    critic = Message(header={"policy_version": 4}, arrays={"param.v": np.arange(6, dtype=np.float32).reshape(3, 2),
                                                            "optim.state.0.step": np.array(3.0, np.float32)})
    with_parts = CheckpointState(**{**state(2).__dict__, "parts": {"critic": critic}})
    path = Checkpointer(directory=tmp_path / "a").save(state=with_parts)
    files = json.loads((path / "manifest.json").read_text())["files"]
    assert set(files) == {"weights.safetensors", "critic.safetensors"}
    loaded = load_checkpoint(path=path)
    assert set(loaded.parts) == {"critic"} and loaded.parts["critic"].header["policy_version"] == 4
    for name, array in critic.arrays.items():
        np.testing.assert_array_equal(loaded.parts["critic"].arrays[name], array)
    assert load_checkpoint(path=Checkpointer(directory=tmp_path / "b").save(state=state(2))).parts == {}
