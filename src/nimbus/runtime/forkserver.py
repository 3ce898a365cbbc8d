"""The fork server: a template process that has imported the heavy modules once and forks workers from
itself, so a cold start costs milliseconds instead of a fresh interpreter importing torch (ARTOS 4.2).

How it works (``runtime.start_method: fork_server``, the default of the local backend):

* The driver's spawner thread starts ``python -P -m nimbus.runtime.fork_template`` (runtime/interpreter.py: never
  from the current directory) with one end of a ``SOCK_SEQPACKET`` socketpair. The server sets
  ``PR_SET_PDEATHSIG`` (it dies with that thread, so with the driver), imports ``--preload`` modules (numpy,
  torch, gymnasium for training) and then serves: runtime/fork_template.py is its side.
* A spawn request is one codec frame (``SpawnRequest``) with the worker's end of a fresh socketpair attached
  as ``SCM_RIGHTS``; the reply is one frame ``{pid, error}`` with the child's pidfd attached. Nothing is
  pickled either way; the server refuses what is not a valid request and goes on.
* The driver holds each worker as a ``ForkedProcess`` (poll, kill, wait over the pidfd; the server, its
  parent, reaps it). Exit statuses are not visible to the driver (``FORKED_EXIT_STATUS``): nothing in
  the runtime reads them; socket EOF is how the driver learns of a death.
* P15: driver SIGKILLed -> the server's PDEATHSIG kills it -> every worker's PDEATHSIG kills them; the
  janitor knows the server's pid and every worker's pid as well (the second line).
* The server runs in its own session, so a SIGTERM to the driver's process group reaches only the driver,
  which stops the run and retires its workers; ``interrupt`` (the spawner closing) makes every later
  ``spawn`` fail at once, so a closing runtime never starts a worker or a new server.

Example::

    server = ForkServer(prefix=run_prefix(), preload=("numpy",), janitor_track=print)
    handle = server.spawn(worker_id="w1", spec=spec, inline_max_bytes=65536, compress_min_bytes=1 << 20)
    server.close()
"""

from __future__ import annotations

import importlib
import logging
import os
import select
import signal
import socket
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict

from nimbus.data.codec import Message, decode, encode
from nimbus.errors import CodecError
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.fork_template import MAX_MESSAGE_BYTES, SpawnRequest, run_forked
from nimbus.runtime.interpreter import module_command

log = logging.getLogger(__name__)
FORKED_EXIT_STATUS = -1  # what ForkedProcess reports once gone: the exit status belongs to the server
TRAINING_PRELOAD = ("numpy", "torch", "gymnasium")  # what a training run's workers import anyway


class ForkedProcess:
    """A worker forked by the fork server, seen through a pidfd: the subset of Popen the pool uses."""

    def __init__(self, *, pid: int, pidfd: int) -> None:
        self.pid, self._pidfd = pid, pidfd
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self._gone()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(cmd=f"forked worker {self.pid}", timeout=timeout or 0.0)
            self._gone()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _gone(self) -> None:
        self.returncode = FORKED_EXIT_STATUS
        os.close(self._pidfd)


def may_fork_driver() -> bool:
    """Whether this process may become the template by forking itself: on the main thread with no other Python
    thread (a lock another thread holds would stay held in the child). Native threads are not counted: numpy's
    OpenBLAS starts its pool at import, and a template started afresh forks its workers with that pool too."""
    return threading.current_thread() is threading.main_thread() and threading.active_count() == 1


class TemplateProcess:
    """A template forked from this process (``fork_driver``): the subset of Popen the server uses. This process is
    its parent, so it reaps it."""

    def __init__(self, *, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self._reap(0)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _reap(self, options: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, options)
        except ChildProcessError:   # reaped elsewhere: gone all the same
            self.returncode = FORKED_EXIT_STATUS
            return
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)


def _fork_template(*, ours: socket.socket, theirs: socket.socket, env: dict[str, str],
                   preload: tuple[str, ...]) -> TemplateProcess:
    """Fork this process into a template (fork_template.py ``run_forked``); the child never returns from here."""
    parent_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ours.close()
            code = run_forked(fd=theirs.fileno(), parent_pid=parent_pid, env=env, preload=preload)
        except BaseException:  # noqa: BLE001 - a forked template must never return into the driver's code
            traceback.print_exc()
        finally:
            os._exit(code)
    return TemplateProcess(pid=pid)


class ForkServer:
    """The driver's end. ``spawn`` is serialized (one request in flight); a server that died is restarted
    once per request. ``janitor_track(pid)`` is told the server's pid each time one starts.

    Must be created and used on one long-lived thread (the pool's spawner): PR_SET_PDEATHSIG follows the
    thread that forked the server.
    """

    def __init__(self, *, prefix: str, preload: tuple[str, ...], env: dict[str, str],
                 janitor_track: Callable[[int], None], fork_driver: bool = False) -> None:
        self._prefix, self._preload, self._env, self._track = prefix, preload, env, janitor_track
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | TemplateProcess | None = None
        self._sock: socket.socket | None = None
        self._closing = False   # set by interrupt(): no request is sent and no server is started any more
        # also sets _owner (the thread whose end kills the server) and _cwd (its workers'); a restart is a fresh one
        self._start(fork_driver=fork_driver and may_fork_driver())

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def preload(self) -> tuple[str, ...]:
        return self._preload

    @property
    def env(self) -> dict[str, str]:
        """The environment the server started with: its workers' (each request adds the run's prefix)."""
        return self._env

    @property
    def cwd(self) -> str:
        return self._cwd

    @property
    def reusable(self) -> bool:
        """Alive, not interrupted, and tied to the main thread (started by ``runtime/spare_server.py start_early``): it
        outlives the run that used it, so the next run of this process may adopt it. Lock-free: ``close`` of a
        spawner asks while a spawn may hold the lock."""
        proc = self._proc
        return (self._owner is threading.main_thread() and not self._closing and proc is not None
                and proc.poll() is None)

    def adopt(self, *, prefix: str, janitor_track: Callable[[int], None]) -> bool:
        """Serve a run from now on (a server started before the run, ``start_early``): its workers get the
        run's ``prefix`` and the run's janitor learns the server's pid. False if the server is gone."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                return False
            self._prefix, self._track = prefix, janitor_track
            janitor_track(self._proc.pid)
            return True

    def _start(self, *, fork_driver: bool = False) -> None:
        if fork_driver:   # the template inherits them instead of importing them again
            for module in self._preload:
                importlib.import_module(module)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # its own session: a SIGTERM to the driver's process group is the driver's to handle (it stops the
            # run and then its workers), as Ctrl-C is; the server and its workers die with the driver regardless
            if fork_driver and may_fork_driver():
                self._proc = _fork_template(ours=ours, theirs=theirs, env=self._env, preload=self._preload)
            else:
                argv = [*module_command(module="nimbus.runtime.fork_template"), "--fd", str(theirs.fileno()),
                        "--parent-pid", str(os.getpid()), "--preload", ",".join(self._preload)]
                self._proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), env=self._env,
                                              stdin=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        # the thread whose end kills the server (PR_SET_PDEATHSIG): a restart on the spawner thread dies with it
        self._owner = threading.current_thread()
        self._cwd = os.getcwd()   # its workers' working directory
        self._track(self._proc.pid)

    def spawn(self, *, worker_id: str, spec: FunctionSpec, inline_max_bytes: int,
              compress_min_bytes: int | None) -> tuple[ForkedProcess, socket.socket, float]:
        """Fork a worker bound to ``spec``: (process, the driver's socket to it, spawn wall time). After
        ``interrupt`` it raises OSError at once: a closing runtime starts no worker and no new server."""
        with self._lock:
            for restarted in (False, True):
                if self._closing:
                    raise OSError(f"the fork server is closing: {worker_id} not started")
                try:
                    return self._spawn_once(worker_id=worker_id, spec=spec, inline_max_bytes=inline_max_bytes,
                                            compress_min_bytes=compress_min_bytes)
                except (OSError, CodecError) as exc:
                    if self._closing:
                        raise OSError(f"the fork server is closing: {worker_id} not started") from exc
                    if restarted:
                        raise
                    log.warning("fork server %s failed (%s); starting a new one", self.pid, exc)
                    self._stop()
                    self._start()
            raise AssertionError("unreachable")

    def _spawn_once(self, *, worker_id: str, spec: FunctionSpec, inline_max_bytes: int,
                    compress_min_bytes: int | None) -> tuple[ForkedProcess, socket.socket, float]:
        parent_sock, child_sock = socket.socketpair()
        spawned_at = time.time()
        request = SpawnRequest(worker_id=worker_id, function=spec.name, entrypoint=spec.entrypoint, prefix=self._prefix,
                               spawn_time=spawned_at, threads=max(1, int(spec.resources.cpus)), driver_pid=os.getpid(),
                               inline_max_bytes=inline_max_bytes,
                               compress_min_bytes=-1 if compress_min_bytes is None else compress_min_bytes)
        try:
            socket.send_fds(self._sock, [encode(Message(header=asdict(request)), compress_min_bytes=None)],
                            [child_sock.fileno()])
            data, fds, _, _ = socket.recv_fds(self._sock, MAX_MESSAGE_BYTES, 1)
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
        if not data:
            parent_sock.close()
            raise ConnectionResetError("the fork server closed its socket")
        try:
            reply = decode(data).header
        except CodecError:
            reply = {"error": "its reply is not a codec frame"}
        pid = reply.get("pid")
        if reply.get("error") is not None or type(pid) is not int or pid <= 0 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            parent_sock.close()
            raise OSError(f"fork server could not fork {worker_id}: {reply.get('error') or reply}")
        return ForkedProcess(pid=pid, pidfd=fds[0]), parent_sock, spawned_at

    def interrupt(self) -> None:
        """From any thread: refuse every later ``spawn`` and wake one blocked waiting for the server's answer (a
        new server importing torch takes seconds); ``close`` still stops the server, on the owner thread."""
        self._closing = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    def close(self) -> None:
        """Stop the server (its workers die with it: retire them first)."""
        with self._lock:
            self._stop()
