import json
import os
from pathlib import Path

import numpy as np
import pytest

from nimbus.data import checkpoint as ckpt_mod
from nimbus.data.checkpoint import Checkpointer, CheckpointState, load_checkpoint
from nimbus.data.codec import Message
from nimbus.errors import CheckpointError


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
    with pytest.raises(CheckpointError) as full:   # RELIABILITY.md: disk full → temp removed, previous kept, clear
        ckpt.save(state=state(2))
    assert str(full.value) == (f"checkpoint of round 2 not written to {tmp_path}: No space left on device (disk full);"
                               f" its temporary files were removed and the previous checkpoint "
                               f"{tmp_path / 'ckpt-000001'} is kept")
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
from nimbus.data import checkpoint as c
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
    """MARL's critic and target (marless/checkpoint.py): ``parts`` files beside the weights, in the
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


def _flip_tensor_bytes(path: Path) -> None:
    """Flip bytes inside the tensor data of a safetensors file: the header is untouched, so it still parses."""
    data = bytearray(path.read_bytes())
    header_len = int.from_bytes(data[:8], "little")
    start = 8 + header_len
    assert len(data) - start >= 8, "the file has tensor data to flip"
    for offset in range(start, start + 8):
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_flipped_bytes_in_valid_tensor_data_fail_the_checksum_and_resume_falls_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """#28.2: the corrupt file still parses as safetensors, so only the SHA-256 check refuses it; the newest
    checkpoint that verifies (not the oldest) comes back, with a warning naming the mismatch."""
    from nimbus.data.ckptfile import read_message
    ckpt = Checkpointer(directory=tmp_path, keep=3)
    for r in (1, 2, 3):
        newest = ckpt.save(state=state(r))
    weights = newest / "weights.safetensors"
    _flip_tensor_bytes(weights)
    flipped = read_message(data=weights.read_bytes(), weights=True)   # parses: only the checksum can tell
    assert not np.array_equal(flipped.arrays["param.w"], np.full((3, 2), 3, np.float32))
    with pytest.raises(CheckpointError, match="SHA-256 mismatch"):
        load_checkpoint(path=newest)
    with caplog.at_level("WARNING"):
        loaded = ckpt.load_latest()
    assert (loaded.round, loaded.policy_version) == (2, 2)
    np.testing.assert_array_equal(loaded.weights.arrays["param.w"], np.full((3, 2), 2, np.float32))
    assert f"checkpoint {newest} is unusable" in caplog.text and "SHA-256 mismatch" in caplog.text


def test_flipped_bytes_in_the_optimizer_file_fail_the_checksum(tmp_path: Path) -> None:
    ckpt = Checkpointer(directory=tmp_path)
    ckpt.save(state=state(1))
    newest = ckpt.save(state=CheckpointState(**{**state(2).__dict__, "optimizer": state(9).weights}))
    _flip_tensor_bytes(newest / "optimizer.safetensors")
    assert ckpt.load_latest().round == 1


def test_every_manifest_field_round_trips_under_its_own_name(tmp_path: Path) -> None:
    saved = CheckpointState(weights=state(1).weights, optimizer=None, policy_version=7, round=11, env_steps=13_000,
                            episodes=17, config={"name": "t", "seed": 3}, extra={"wall_s": 1.5})
    loaded = load_checkpoint(path=Checkpointer(directory=tmp_path).save(state=saved))
    assert (loaded.policy_version, loaded.round, loaded.env_steps, loaded.episodes, loaded.config, loaded.extra) == \
        (7, 11, 13_000, 17, {"name": "t", "seed": 3}, {"wall_s": 1.5})


@pytest.mark.parametrize("broken", ["round", "files", "policy_version", "env_steps", "episodes", "config",
                                    "files_without_weights", "round_as_text", "a_list"])
def test_a_manifest_lacking_keys_falls_back_to_the_previous_checkpoint(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, broken: str) -> None:
    """#28.6: valid JSON without the keys loading needs is a corrupt checkpoint (a warning and the previous one),
    never a KeyError."""
    ckpt = Checkpointer(directory=tmp_path, keep=3)
    ckpt.save(state=state(1))
    newest = ckpt.save(state=state(2))
    manifest = json.loads((newest / "manifest.json").read_text())
    if broken == "files_without_weights":
        manifest["files"].pop("weights.safetensors")
    elif broken == "round_as_text":
        manifest["round"] = "2"
    elif broken == "a_list":
        manifest = [manifest]
    else:
        manifest.pop(broken)
    (newest / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level("WARNING"):
        assert ckpt.load_latest().round == 1
    assert f"checkpoint {newest} is unusable" in caplog.text and "manifest.json" in caplog.text
    with pytest.raises(CheckpointError, match="manifest.json"):
        load_checkpoint(path=newest)


def test_an_incompatible_newest_checkpoint_is_refused_not_skipped(tmp_path: Path) -> None:
    """A newer nimbus's checkpoint is not silently replaced by an older one: the error names both versions."""
    ckpt = Checkpointer(directory=tmp_path)
    ckpt.save(state=state(1))
    newest = ckpt.save(state=state(2))
    manifest = json.loads((newest / "manifest.json").read_text())
    (newest / "manifest.json").write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(CheckpointError, match="format version 99"):
        ckpt.load_latest()


def test_checkpoints_are_ordered_by_round_never_by_name(tmp_path: Path) -> None:
    """#28.4: ``ckpt-1000000`` sorts before ``ckpt-999999`` by name; pruning by name deleted the newest."""
    ckpt = Checkpointer(directory=tmp_path, keep=2)
    for r in (999_998, 999_999, 1_000_000, 1_000_001):
        ckpt.save(state=state(r))
    assert [p.name for p in ckpt.list()] == ["ckpt-1000000", "ckpt-1000001"]
    assert ckpt.load_latest().round == 1_000_001
    (tmp_path / "ckpt-notes").mkdir()   # another name is not a checkpoint
    assert [p.name for p in ckpt.list()] == ["ckpt-1000000", "ckpt-1000001"]


def test_files_are_fsynced_then_renamed_into_place_then_the_directory_fsynced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """P8's order: every file and the temp directory fsynced, one atomic rename temp → final, then the parent
    directory fsynced (without it the rename itself may not survive a power cut)."""
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = ckpt_mod.os.fsync, ckpt_mod.os.rename

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rename(src: Path, dst: Path) -> None:
        events.append(("rename", f"{src} -> {dst}"))
        real_rename(src, dst)

    monkeypatch.setattr(ckpt_mod.os, "fsync", fsync)
    monkeypatch.setattr(ckpt_mod.os, "rename", rename)
    final = Checkpointer(directory=tmp_path).save(state=CheckpointState(**{**state(4).__dict__,
                                                                            "optimizer": state(4).weights}))
    renames = [i for i, (kind, _) in enumerate(events) if kind == "rename"]
    assert len(renames) == 1
    src, dst = events[renames[0]][1].split(" -> ")
    assert Path(src).parent == tmp_path and Path(src).name.startswith(".tmp-ckpt-") and Path(dst) == final
    before = {Path(path).name for kind, path in events[:renames[0]] if kind == "fsync"}
    assert {"weights.safetensors", "optimizer.safetensors", "manifest.json", Path(src).name} <= before
    assert events[renames[0] + 1:] == [("fsync", str(tmp_path))]
