"""Named shared-memory segments: naming under the run prefix, sharing across processes, sweeping."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from nimbus.data.shm import (PREFIX_ENV, Segment, list_segments, run_prefix, segment_name, streaming_copy_env,
                             sweep, unlink)


@pytest.fixture(autouse=True)
def prefix(monkeypatch: pytest.MonkeyPatch):
    value = f"nimbus_t{os.getpid()}_{uuid.uuid4().hex[:8]}_"
    monkeypatch.setenv(PREFIX_ENV, value)
    yield value
    sweep(prefix=value)


def run_python(code: str, prefix: str) -> str:
    env = {**os.environ, PREFIX_ENV: prefix}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_run_prefix_comes_from_the_environment(prefix: str) -> None:
    assert run_prefix() == prefix


def test_run_prefix_defaults_to_the_driver_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PREFIX_ENV)
    assert run_prefix() == f"nimbus_{os.getpid()}_"
    assert os.environ[PREFIX_ENV] == f"nimbus_{os.getpid()}_"  # inherited by workers started later


def test_segment_names_are_unique_and_under_the_prefix(prefix: str) -> None:
    names = {segment_name(kind="w") for _ in range(100)}
    assert len(names) == 100
    assert all(name.startswith(prefix + "w_") for name in names)


def test_create_attach_share_bytes(prefix: str) -> None:
    seg = Segment.create(name=segment_name(kind="t"), size_bytes=64)
    other = Segment.attach(name=seg.name)
    seg.buffer[:5] = b"hello"
    assert bytes(other.buffer[:5]) == b"hello" and other.size_bytes == 64
    other.close()
    seg.close()
    assert list_segments(prefix=prefix) == [seg.name]
    assert unlink(name=seg.name) is True
    assert unlink(name=seg.name) is False
    assert list_segments(prefix=prefix) == []


def test_create_of_an_existing_name_raises() -> None:
    seg = Segment.create(name=segment_name(kind="t"), size_bytes=8)
    with pytest.raises(FileExistsError):
        Segment.create(name=seg.name, size_bytes=8)
    seg.close()
    seg.unlink()


def test_attach_of_a_missing_name_raises(prefix: str) -> None:
    with pytest.raises(FileNotFoundError):
        Segment.attach(name=prefix + "missing")


def test_segment_survives_an_attaching_process_that_exits(prefix: str) -> None:
    seg = Segment.create(name=segment_name(kind="t"), size_bytes=16)
    code = (f"from nimbus.data.shm import Segment\n"
            f"s = Segment.attach(name={seg.name!r}); s.buffer[:3] = b'abc'; s.close(); print(s.size_bytes)")
    assert run_python(code, prefix) == "16"
    assert list_segments(prefix=prefix) == [seg.name]  # no resource tracker unlinked it at exit
    assert bytes(seg.buffer[:3]) == b"abc"
    seg.close()
    seg.unlink()


def test_close_with_live_views_leaves_the_mapping_to_gc() -> None:
    seg = Segment.create(name=segment_name(kind="t"), size_bytes=8)
    view = seg.buffer[:4]
    seg.close()  # must not raise while `view` is alive
    view[0] = 7
    assert view[0] == 7
    seg.unlink()


def test_sweep_removes_only_the_prefix(prefix: str) -> None:
    mine = [Segment.create(name=segment_name(kind="t"), size_bytes=8) for _ in range(3)]
    other_prefix = f"nimbus_o{os.getpid()}_{uuid.uuid4().hex[:8]}_"
    other = Segment.create(name=other_prefix + "x", size_bytes=8)
    try:
        assert sweep(prefix=prefix) == 3
        assert list_segments(prefix=prefix) == []
        assert list_segments(prefix=other_prefix) == [other.name]
    finally:
        for seg in [*mine, other]:
            seg.close()
        sweep(prefix=other_prefix)


def test_sweep_orphans_removes_segments_of_dead_drivers_only() -> None:
    import subprocess
    import sys

    from nimbus.data.shm import Segment, list_segments, sweep_orphans

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    orphan = Segment.create(name=f"nimbus_{dead}_orphan_test", size_bytes=64)
    mine = Segment.create(name=f"nimbus_{os.getpid()}_mine_test", size_bytes=64)
    orphan.close()
    mine.close()
    try:
        sweep_orphans()
        names = list_segments(prefix="nimbus_")
        assert orphan.name not in names and mine.name in names
    finally:
        mine.unlink()
        orphan.unlink()


def test_streaming_copy_env_sets_the_glibc_threshold_unless_the_user_did() -> None:
    env = streaming_copy_env({"PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["GLIBC_TUNABLES"] == f"glibc.cpu.x86_non_temporal_threshold={4 << 20:#x}"
    assert streaming_copy_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})["GLIBC_TUNABLES"] == \
        "glibc.malloc.arena_max=2"
    started = subprocess.run([sys.executable, "-c", "import numpy; print('ok')"], env={**os.environ, **env},
                             capture_output=True, text=True, timeout=60)
    assert started.stdout.strip() == "ok", started.stderr  # a process started with it runs normally
