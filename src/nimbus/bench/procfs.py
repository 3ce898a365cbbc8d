"""Process memory from /proc, for the benchmarks that report what nimbus (or Ray) keeps resident."""

from __future__ import annotations

from pathlib import Path

from nimbus.runtime.ray_cluster import descendants

__all__ = ["descendants", "memory_kib", "open_fds"]


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of ``pid`` in KiB (0, 0 if it is gone). RSS counts shared pages once per process (an
    upper bound); PSS splits them between their users (the fair share)."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0, 0
    fields = {line.split(":")[0]: int(line.split()[1]) for line in rollup[1:] if line.split()[-1] == "kB"}
    return fields.get("Rss", 0), fields.get("Pss", 0)


def open_fds(pid: int) -> int:
    """Open file descriptors of ``pid`` (0 if it is gone)."""
    try:
        return len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except OSError:
        return 0
