"""Named shared-memory segments: naming under the run prefix, sharing across processes, sweeping."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid

import pytest

from nimbus.data.shm import (
    PREFIX_ENV,
    Segment,
    list_segments,
    run_prefix,
    segment_name,
    streaming_copy_env,
    sweep,
    unlink,
)
from support import run_python


def test_run_prefix_comes_from_the_environment(prefix: str) -> None:
    assert run_prefix() == prefix


def test_a_process_without_a_prefix_claims_an_owned_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from nimbus.data.shm import OWNER_SUFFIX, release_run_prefix
    monkeypatch.delenv(PREFIX_ENV)
    claimed = run_prefix()
    try:
        assert re.fullmatch(r"nimbus_r[0-9a-f]{16}_", claimed)
        assert os.environ[PREFIX_ENV] == claimed and run_prefix() == claimed  # inherited by workers started later
        assert list_segments(prefix=claimed) == [claimed + OWNER_SUFFIX]  # locked while this process lives
    finally:
        release_run_prefix(prefix=claimed)
    assert list_segments(prefix=claimed) == []


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


# A driver in a child process: claims its prefix, makes one segment, reports both, then waits for stdin.
_DRIVER = """
import sys
from nimbus.data.shm import Segment, claim_run_prefix, segment_name
prefix = claim_run_prefix()
seg = Segment.create(name=segment_name(kind="w"), size_bytes=64)
print(prefix, seg.name, flush=True)
sys.stdin.read()
"""


def _start_driver(*, inherited: str, argv_prefix: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str, str]:
    proc = subprocess.Popen([*argv_prefix, sys.executable, "-c", _DRIVER], env={**os.environ, PREFIX_ENV: inherited},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    if len(line) != 2:
        proc.kill()
        raise AssertionError(f"driver did not start: {proc.communicate()[1][-2000:]}")
    return proc, line[0], line[1]


def test_two_drivers_started_from_one_parent_get_their_own_prefixes(prefix: str) -> None:
    """The inherited NIMBUS_SHM_PREFIX is a namespace, not a run: each driver claims a fresh prefix
    under it, so neither can collide with (or sweep) the other's segments."""
    first, first_prefix, first_segment = _start_driver(inherited=prefix)
    second, second_prefix, second_segment = _start_driver(inherited=prefix)
    try:
        assert first_prefix != second_prefix
        assert first_prefix.startswith(prefix) and second_prefix.startswith(prefix)
        assert not first_prefix.startswith(second_prefix) and not second_prefix.startswith(first_prefix)
        assert first_segment.startswith(first_prefix) and second_segment.startswith(second_prefix)
        assert sweep(prefix=first_prefix) == 2  # its segment and its owner file, nothing of the other's
        assert second_segment in list_segments(prefix=prefix)
    finally:
        for proc in (first, second):
            proc.kill()
            proc.communicate()


def test_a_driver_started_by_a_driver_does_not_nest_under_its_prefix(prefix: str) -> None:
    from nimbus.data.shm import claim_run_prefix, release_run_prefix
    outer = claim_run_prefix()
    inner = claim_run_prefix()  # e.g. a second run in one process, or a run started from a run
    try:
        assert outer != inner and inner.startswith(prefix) and not inner.startswith(outer)
        assert os.environ[PREFIX_ENV] == inner  # the workers the newest run starts inherit its prefix
    finally:
        release_run_prefix(prefix=outer)
        release_run_prefix(prefix=inner)
    assert list_segments(prefix=prefix) == []  # released: owner files gone


def test_sweep_orphans_keeps_a_live_run_whose_pid_means_nothing_here_and_sweeps_a_dead_one(prefix: str) -> None:
    """Liveness is the owner lock, not kill(pid, 0): a live run under a name carrying a dead pid keeps its
    segments; once it is SIGKILLed (no clean-up ran) its segments and owner file are swept."""
    from nimbus.data.shm import sweep_orphans
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout.strip()
    proc, run, segment = _start_driver(inherited=f"{prefix}{dead_pid}_")
    try:
        sweep_orphans()
        assert segment in list_segments(prefix=run)
    finally:
        proc.kill()
        proc.communicate()
    assert segment in list_segments(prefix=run)  # SIGKILL: nothing cleaned up
    assert sweep_orphans() >= 1
    assert list_segments(prefix=run) == []


def test_sweep_orphans_keeps_a_live_run_in_another_pid_namespace(prefix: str) -> None:
    """/dev/shm shared across PID namespaces (a container with --ipc=host): the other run's pid is
    invisible here, its lock is not."""
    from nimbus.data.shm import sweep_orphans
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a PID namespace here (unshare: {probe.stderr.decode().strip()[:200]})")
    proc, run, segment = _start_driver(inherited=prefix, argv_prefix=("unshare", "--user", "--map-root-user",
                                                                      "--pid", "--fork", "--kill-child=SIGKILL"))
    try:
        sweep_orphans()
        assert segment in list_segments(prefix=run)
    finally:
        proc.kill()  # --kill-child: the driver in the namespace gets SIGKILL too
        proc.communicate()
    deadline = time.monotonic() + 10
    while list_segments(prefix=run) and time.monotonic() < deadline:
        sweep_orphans()  # swept as soon as the kernel has dropped the dead driver's lock
        time.sleep(0.05)
    assert list_segments(prefix=run) == []


def test_streaming_copy_env_sets_the_glibc_threshold_unless_the_user_did() -> None:
    env = streaming_copy_env({"PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["GLIBC_TUNABLES"] == f"glibc.cpu.x86_non_temporal_threshold={4 << 20:#x}"
    assert streaming_copy_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})["GLIBC_TUNABLES"] == \
        "glibc.malloc.arena_max=2"
    started = subprocess.run([sys.executable, "-c", "import numpy; print('ok')"], env={**os.environ, **env},
                             capture_output=True, text=True, timeout=60)
    assert started.stdout.strip() == "ok", started.stderr  # a process started with it runs normally
