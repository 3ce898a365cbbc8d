"""Named POSIX shared-memory segments without Python's resource tracker.

``multiprocessing.shared_memory`` registers every segment with a tracker process that unlinks it
when *any* attaching process exits, which breaks segments shared between long-lived workers. nimbus
owns lifetimes itself: the creator (or the janitor, if the driver dies) unlinks. Every name starts
with its run's prefix (``claim_run_prefix``: unique per driver, inherited by its workers) so a run's
segments can be listed and swept, and a run that died with its janitor is recognised by its owner
lock (``sweep_orphans``).

Example::

    seg = Segment.create(name=segment_name(kind="w"), size_bytes=1024)
    seg.buffer[:5] = b"hello"
    other = Segment.attach(name=seg.name)
    assert bytes(other.buffer[:5]) == b"hello"
    other.close(); seg.close(); seg.unlink()
"""

from __future__ import annotations

import _posixshmem  # CPython's own binding, used by multiprocessing.shared_memory
import fcntl
import itertools
import mmap
import os
import re
import secrets
import shutil
import threading
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX_ENV = "NIMBUS_SHM_PREFIX"
STREAMING_COPY_MIN_BYTES = 4 << 20
OWNER_SUFFIX = "owner"  # /dev/shm/<run prefix>owner: flocked by the run's driver while it lives
_RUN_TOKEN = re.compile(r"r[0-9a-f]{16}_$")
_OWNER_FILE = re.compile(r"^(nimbus_(?:.*_)?r[0-9a-f]{16}_)" + OWNER_SUFFIX + "$")
_owner_locks: dict[str, int] = {}  # prefix -> the locked descriptor of its owner file (this process's runs)
_counter = itertools.count()
_counter_lock = threading.Lock()


def run_prefix() -> str:
    """The prefix of every segment of this run: a driver's own (``claim_run_prefix``), inherited by its
    workers through ``NIMBUS_SHM_PREFIX``. A process with none set claims one."""
    prefix = os.environ.get(PREFIX_ENV)
    return prefix if prefix is not None else claim_run_prefix()


def claim_run_prefix() -> str:
    """A fresh prefix for a driver, owned while this process holds its lock (``sweep_orphans``).

    ``<base>r<16 hex>_``: ``base`` is an inherited ``NIMBUS_SHM_PREFIX`` (without the run token of a
    driver it came from) or ``nimbus_``, so two drivers started from one parent never share segments,
    and a parent that set the variable can still list and sweep all of them. The owner lock is taken
    before the name is published (a temporary name, flock, rename), so no sweeper ever sees an
    unlocked owner file of a live run. Sets ``NIMBUS_SHM_PREFIX`` for the workers this process starts.
    """
    base = _RUN_TOKEN.sub("", os.environ.get(PREFIX_ENV, "nimbus_")) or "nimbus_"
    prefix = f"{base}r{secrets.token_hex(8)}_"
    if SHM_DIR.is_dir():
        claim = SHM_DIR / f"{prefix}claim"
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(claim, SHM_DIR / f"{prefix}{OWNER_SUFFIX}")
        _owner_locks[prefix] = fd
    os.environ[PREFIX_ENV] = prefix
    return prefix


def release_run_prefix(*, prefix: str) -> None:
    """A driver is done with ``prefix`` (its segments are gone): remove its owner file and drop the lock."""
    fd = _owner_locks.pop(prefix, None)
    if fd is not None:
        unlink(name=f"{prefix}{OWNER_SUFFIX}")
        os.close(fd)  # closing the only descriptor releases the flock


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
    def create(cls, *, name: str, size_bytes: int, pretouch: bool = True, populate: bool = False) -> Segment:
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
    def attach(cls, *, name: str, populate: bool = False) -> Segment:
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


def sweep_orphans() -> int:
    """Unlink the segments of runs whose driver is gone (its janitor died with it, e.g. a process-group kill).

    A run is alive while its driver holds the flock on ``<prefix>owner`` (taken by ``claim_run_prefix``);
    the kernel drops it when the driver dies, however it dies. A lock, not ``kill(pid, 0)``: with
    /dev/shm shared across PID namespaces (containers with ``--ipc=host``) another run's pid means
    nothing here. Segments without an owner file (a prefix set by hand) are never touched.
    Returns how many segments were removed.
    """
    removed = 0
    for name in list_segments(prefix="nimbus_"):
        match = _OWNER_FILE.match(name)
        if match is None or match.group(1) in _owner_locks:
            continue
        try:
            fd = os.open(SHM_DIR / name, os.O_RDWR)
        except OSError:  # gone meanwhile, or another user's
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # its driver is alive
        try:
            removed += sum(unlink(name=segment) for segment in list_segments(prefix=match.group(1)) if segment != name)
            unlink(name=name)
        finally:
            os.close(fd)
    return removed


class SharedMemoryTooSmall(ValueError):
    """A block set would not fit in the free shared memory (the caller names the settings that sized it)."""


def check_room(*, total_bytes: int) -> None:
    """Refuse ``total_bytes`` of new segments when /dev/shm has less free: tmpfs would SIGBUS on first touch
    instead. Raises SharedMemoryTooSmall."""
    if SHM_DIR.is_dir():
        free = shutil.disk_usage(SHM_DIR).free
        if total_bytes > free:
            raise SharedMemoryTooSmall(f"buffer needs {total_bytes / 2**20:.1f} MiB of shared memory, "
                                       f"{SHM_DIR} has {free / 2**20:.1f} MiB free")
