"""Named POSIX shared-memory segments without Python's resource tracker.

``multiprocessing.shared_memory`` registers every segment with a tracker process that unlinks it
when *any* attaching process exits, which breaks segments shared between long-lived workers. nimbus
owns lifetimes itself: the creator (or the janitor, if the driver dies) unlinks. Every name starts
with ``nimbus_<driver pid>_`` so a run's segments can be listed and swept.

Example::

    seg = Segment.create(name=segment_name(kind="w"), size_bytes=1024)
    seg.buffer[:5] = b"hello"
    other = Segment.attach(name=seg.name)
    assert bytes(other.buffer[:5]) == b"hello"
    other.close(); seg.close(); seg.unlink()
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
import threading
from pathlib import Path

import _posixshmem  # CPython's own binding, used by multiprocessing.shared_memory

SHM_DIR = Path("/dev/shm")
PREFIX_ENV = "NIMBUS_SHM_PREFIX"
STREAMING_COPY_MIN_BYTES = 4 << 20
_counter = itertools.count()
_counter_lock = threading.Lock()


def run_prefix() -> str:
    """The prefix of every segment of this run: set by the driver, inherited by its workers."""
    prefix = os.environ.get(PREFIX_ENV)
    if prefix is None:
        prefix = f"nimbus_{os.getpid()}_"
        os.environ[PREFIX_ENV] = prefix
    return prefix


def streaming_copy_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process that writes large bodies into shared memory: glibc's memcpy then uses
    non-temporal stores from ``STREAMING_COPY_MIN_BYTES`` up (its default threshold is ~3/4 of the
    L3 cache), so a body copied into a slot or segment does not first read every destination line it
    overwrites — 16 MiB slot writes ran ~1.5× faster here (docs/benchmarks.md). Read by glibc at
    process start only, so it must be in the environment the process is started with; a
    ``GLIBC_TUNABLES`` already set is left alone (the user's choice wins), and other C libraries
    ignore it."""
    if "GLIBC_TUNABLES" in env:
        return dict(env)
    return {**env, "GLIBC_TUNABLES": f"glibc.cpu.x86_non_temporal_threshold={STREAMING_COPY_MIN_BYTES:#x}"}


def segment_name(*, kind: str) -> str:
    """A fresh unique segment name: ``<run prefix><kind>_<pid>_<n>``."""
    with _counter_lock:
        n = next(_counter)
    return f"{run_prefix()}{kind}_{os.getpid()}_{n}"


class Segment:
    """One mapped shared-memory segment. ``buffer`` is a writable memoryview of ``size_bytes``."""

    def __init__(self, *, name: str, fd: int, size_bytes: int, populate: bool = False) -> None:
        self.name = name
        self.size_bytes = size_bytes
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        try:
            self._mmap = mmap.mmap(fd, max(size_bytes, 1), flags=flags)
        finally:
            os.close(fd)
        self.buffer = memoryview(self._mmap)[:size_bytes]

    @classmethod
    def create(cls, *, name: str, size_bytes: int, pretouch: bool = True, populate: bool = False) -> "Segment":
        """A new segment. ``populate``: map with MAP_POPULATE (allocate and map every page now)."""
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            os.ftruncate(fd, max(size_bytes, 1))
        except OSError:
            os.close(fd)
            _posixshmem.shm_unlink("/" + name)
            raise
        segment = cls(name=name, fd=fd, size_bytes=size_bytes, populate=populate)
        if pretouch and size_bytes:
            # First touch of tmpfs pages is several times slower than a warm memcpy; pay it up front.
            segment._mmap.madvise(mmap.MADV_WILLNEED) if hasattr(mmap, "MADV_WILLNEED") else None
        return segment

    @classmethod
    def attach(cls, *, name: str, populate: bool = False) -> "Segment":
        """Map an existing segment; ``populate`` fills the page tables now instead of on first access."""
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        size_bytes = os.fstat(fd).st_size
        return cls(name=name, fd=fd, size_bytes=size_bytes, populate=populate)

    def close(self) -> None:
        """Unmap. Views into ``buffer`` must be gone; if some are still alive the mapping is left to GC."""
        try:
            self.buffer.release()
            self._mmap.close()
        except (BufferError, ValueError):
            pass

    def unlink(self) -> None:
        unlink(name=self.name)


def unlink(*, name: str) -> bool:
    """Remove a segment by name; True if it existed."""
    try:
        _posixshmem.shm_unlink("/" + name)
        return True
    except FileNotFoundError:
        return False


def list_segments(*, prefix: str = "nimbus_") -> list[str]:
    """Names of existing segments starting with ``prefix`` (Linux: /dev/shm)."""
    if not SHM_DIR.is_dir():
        return []
    return sorted(p.name for p in SHM_DIR.iterdir() if p.name.startswith(prefix))


def sweep(*, prefix: str) -> int:
    """Unlink every segment with this prefix; returns how many were removed."""
    return sum(unlink(name=name) for name in list_segments(prefix=prefix))


_OWNER_PID = re.compile(r"^nimbus_[a-z]*(\d+)_")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_orphans() -> int:
    """Unlink segments whose driver process is gone (its janitor died with it, e.g. a process-group kill).

    Segment names carry the driver's pid (``nimbus_<pid>_``); a name whose pid is alive is kept, even
    if that pid was reused, so this never touches a live run. Returns how many segments were removed.
    """
    removed = 0
    for name in list_segments(prefix="nimbus_"):
        match = _OWNER_PID.match(name)
        if match and int(match.group(1)) != os.getpid() and not _pid_alive(int(match.group(1))):
            removed += unlink(name=name)
    return removed

