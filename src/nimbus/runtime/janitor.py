"""The janitor: a tiny process that cleans up after a driver that died without shutting down (P15).

The driver starts it with ``JanitorClient(prefix=...)``. It holds the read end of a pipe whose write
end only the driver has; the driver tells it ``+pid`` / ``-pid`` as workers come and go. When the pipe
hits EOF without a prior ``q`` (the driver was killed, crashed, or exited without ``shutdown()``),
the janitor SIGKILLs every worker it still knows (after checking the pid still names the same
process, by its start time in /proc), waits for them to go, and unlinks every shared-memory
segment under the driver's run prefix. After a clean ``shutdown()`` the driver sends ``q`` and the
janitor leaves everything alone: other parts of a live driver may still use the run's segments.

The janitor runs in its own session (Ctrl-C in a terminal does not reach it) and imports nothing
heavier than ``nimbus.data.shm``. Workers also die on their own (PR_SET_PDEATHSIG and socket EOF);
the janitor is the second line.

Example::

    janitor = JanitorClient(prefix=run_prefix())
    janitor.track(pid=worker.pid)
    ...
    janitor.untrack(pid=worker.pid)
    janitor.stop()   # clean shutdown: nothing to sweep
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from nimbus.data.shm import sweep
from nimbus.runtime.interpreter import module_command

log = logging.getLogger(__name__)


class JanitorClient:
    """The driver's end: starts the janitor and keeps it informed."""

    def __init__(self, *, prefix: str) -> None:
        read_fd, self._write_fd = os.pipe()  # both ends non-inheritable: no worker gets the write end
        try:
            self._proc = subprocess.Popen(
                [*module_command(module="nimbus.runtime.janitor"), "--fd", str(read_fd), "--prefix", prefix],
                pass_fds=(read_fd,), start_new_session=True, stdin=subprocess.DEVNULL)
        finally:
            os.close(read_fd)
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _send(self, line: str) -> None:
        with self._lock:
            if self._write_fd < 0:
                return
            try:
                os.write(self._write_fd, line.encode())
            except OSError as exc:
                log.warning("janitor: cannot reach the janitor (%s); orphan cleanup is off", exc)

    def track(self, *, pid: int) -> None:
        self._send(f"+{pid}\n")

    def untrack(self, *, pid: int) -> None:
        self._send(f"-{pid}\n")

    def stop(self) -> None:
        """Clean shutdown: the janitor exits without touching anything."""
        self._send("q\n")
        with self._lock:
            if self._write_fd >= 0:
                os.close(self._write_fd)
                self._write_fd = -1
        try:
            self._proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class Reaper:
    """Kills retired workers, collects them, and sweeps the segments each left behind; keeps the
    janitor informed of live pids. Not thread-safe: its owner serializes calls.

    Example::

        reaper = Reaper(prefix=run_prefix())
        reaper.adopt(proc=popen, sweep_prefix=f"{run_prefix()}chan_{popen.pid}_")
        reaper.kill(proc=popen)
        reaper.reap()          # non-blocking: collects whatever has exited
        reaper.close()         # at shutdown: waits, sweeps every adopted process's prefix, stops the janitor
    """

    def __init__(self, *, prefix: str) -> None:
        self._janitor = JanitorClient(prefix=prefix)
        self._dying: list[subprocess.Popen] = []
        self._sweep_prefixes: dict[int, str] = {}

    @property
    def janitor_pid(self) -> int:
        return self._janitor.pid

    @property
    def pending(self) -> bool:
        return bool(self._dying)

    def adopt(self, *, proc: subprocess.Popen, sweep_prefix: str) -> None:
        self._janitor.track(pid=proc.pid)
        self._sweep_prefixes[proc.pid] = sweep_prefix

    def track_helper(self, pid: int) -> None:
        """A helper process of the driver (the fork server) that the janitor must kill too; thread-safe."""
        self._janitor.track(pid=pid)

    def kill(self, *, proc: subprocess.Popen) -> None:
        proc.kill()
        self._dying.append(proc)

    def reap(self, *, wait_s: float = 0.0) -> None:
        for proc in list(self._dying):
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue  # not gone yet: next round
            self._dying.remove(proc)
            if proc.pid in self._sweep_prefixes:
                sweep(prefix=self._sweep_prefixes[proc.pid])
            self._janitor.untrack(pid=proc.pid)

    def close(self, *, wait_s: float = 5.0) -> None:
        """Collect every killed process, sweep every adopted process's prefix, release the janitor."""
        self.reap(wait_s=wait_s)
        for sweep_prefix in self._sweep_prefixes.values():
            sweep(prefix=sweep_prefix)
        self._janitor.stop()


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks): identifies a process, not just a pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cleanup(*, pids: dict[int, str | None], prefix: str, wait_s: float = 2.0) -> int:
    """Kill the still-same processes in ``pids`` (pid -> start time), wait, then sweep ``prefix``."""
    for pid, started in pids.items():
        if started is not None and _start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + wait_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return sweep(prefix=prefix)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nimbus.runtime.janitor")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pids: dict[int, str | None] = {}
    with os.fdopen(args.fd, "r") as pipe:
        for line in pipe:
            command = line.strip()
            if command == "q":
                return 0
            if command.startswith("+"):
                pids[int(command[1:])] = _start_time(int(command[1:]))
            elif command.startswith("-"):
                pids.pop(int(command[1:]), None)
    removed = cleanup(pids=pids, prefix=args.prefix)
    logging.basicConfig(level=logging.INFO)
    log.info("janitor: driver gone; killed %d worker(s), removed %d segment(s) of %s", len(pids), removed, args.prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
