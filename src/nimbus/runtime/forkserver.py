"""The fork server: a template process that has imported the heavy modules once and forks workers from
itself, so a cold start costs milliseconds instead of a fresh interpreter importing torch (ARTOS 4.2).

How it works (``runtime.start_method: fork_server``, the default of the local backend):

* The driver's spawner thread starts ``python -P -m nimbus.runtime.forkserver`` (runtime/interpreter.py: never
  from the current directory) with one end of a
  ``SOCK_SEQPACKET`` socketpair. The server sets ``PR_SET_PDEATHSIG`` (it dies with that thread, so with
  the driver), imports ``--preload`` modules (numpy, torch, gymnasium for training) and then serves.
* A spawn request is one codec frame (``Message`` header: worker id, function, entrypoint, spawn time,
  thread count, frame limits) with the worker's end of a fresh socketpair attached as ``SCM_RIGHTS``.
  Nothing is pickled either way; a request that is not a valid spawn request (``parse_request``: not a codec
  frame, a field missing or mistyped, no socket) is refused with an error reply, and the server goes on.
* The server imports the entrypoint's module into itself the first time it sees it (later forks of that
  function find it imported), forks, and answers one codec frame ``{pid, error}`` with a pidfd of the
  child attached. The child closes the server's socket, takes its environment (thread limits), reseeds
  numpy and torch as a fresh process would have them (``_reseed``), and runs
  ``worker.run`` exactly as a spawned worker does: its own PR_SET_PDEATHSIG ties it to the server.
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

import argparse
import importlib
import logging
import math
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, fields
from typing import Callable

from nimbus.data.codec import Message, decode, encode
from nimbus.data.shm import PREFIX_ENV
from nimbus.errors import CodecError
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.interpreter import module_command
from nimbus.runtime.worker import set_pdeathsig

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 1 << 16
FORKED_EXIT_STATUS = -1  # what ForkedProcess reports once gone: the exit status belongs to the server
TRAINING_PRELOAD = ("numpy", "torch", "gymnasium")  # what a training run's workers import anyway


@dataclass(frozen=True)
class SpawnRequest:
    """One fork request, as the server reads it (``parse_request``): every field present and of its type."""

    worker_id: str
    function: str
    entrypoint: str
    prefix: str
    spawn_time: float
    threads: int
    driver_pid: int
    inline_max_bytes: int
    compress_min_bytes: int   # -1: never compress


_INT_MINIMUM = {"threads": 1, "driver_pid": 1, "inline_max_bytes": 0, "compress_min_bytes": -1}


def _field(*, header: dict, name: str, kind: str) -> "str | int | float":
    value = header.get(name)
    if kind == "float":
        valid = type(value) in (int, float) and math.isfinite(value) and value >= 0
    elif kind == "int":
        valid = type(value) is int and value >= _INT_MINIMUM[name]
    else:  # only the prefix may be empty (a server started before the run: each request names its run's)
        valid = type(value) is str and (bool(value) or name == "prefix")
    if not valid:
        raise CodecError(f"spawn request field {name!r} is {value!r}: not a valid {kind}")
    return float(value) if kind == "float" else value


def parse_request(*, data: bytes) -> SpawnRequest:
    """The request in frame ``data``; CodecError when it is not a frame or a field is missing or wrong."""
    header = decode(data).header
    return SpawnRequest(**{f.name: _field(header=header, name=f.name, kind=str(f.type)) for f in fields(SpawnRequest)})


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


class ForkServer:
    """The driver's end. ``spawn`` is serialized (one request in flight); a server that died is restarted
    once per request. ``janitor_track(pid)`` is told the server's pid each time one starts.

    Must be created and used on one long-lived thread (the pool's spawner): PR_SET_PDEATHSIG follows the
    thread that forked the server.
    """

    def __init__(self, *, prefix: str, preload: tuple[str, ...], env: dict[str, str],
                 janitor_track: Callable[[int], None]) -> None:
        self._prefix, self._preload, self._env, self._track = prefix, preload, env, janitor_track
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._closing = False   # set by interrupt(): no request is sent and no server is started any more
        self._start()   # also sets _owner (the thread whose end kills the server) and _cwd (its workers')

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

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [*module_command(module="nimbus.runtime.forkserver"), "--fd", str(theirs.fileno()),
                "--parent-pid", str(os.getpid()), "--preload", ",".join(self._preload)]
        try:
            # its own session: a SIGTERM to the driver's process group is the driver's to handle (it stops the
            # run and then its workers), as Ctrl-C is; the server and its workers die with the driver regardless
            self._proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), env=self._env, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
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
              compress_min_bytes: int | None) -> "tuple[ForkedProcess, socket.socket, float]":
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
                    compress_min_bytes: int | None) -> "tuple[ForkedProcess, socket.socket, float]":
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


# ---- the server process -------------------------------------------------------------------------------


def _import_quietly(module: str) -> None:
    """Import into the template; a failure is left for the worker to report (it imports again)."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - the forked worker reports the real error
        log.debug("fork server: cannot preload %s: %s", module, exc)


def _reap() -> None:
    """Collect exited workers (they are the server's children) without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _reseed() -> None:
    """The random state a spawned worker would have had: numpy's global generator from OS entropy (a fork
    would share the template's), torch's back at its initial seed (fixed in a fresh process, so runs that
    rely on it stay reproducible); Python's ``random`` reseeds itself at fork."""
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(int.from_bytes(os.urandom(4), "little"))
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.manual_seed(torch.initial_seed())


def _child(*, server_sock: socket.socket, fd: int, request: SpawnRequest, server_pid: int) -> int:
    from nimbus.runtime.worker import run

    server_sock.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    threads = str(request.threads)
    os.environ.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
    if request.prefix:   # the run's segment prefix: a server started before the run claimed one has none
        os.environ[PREFIX_ENV] = request.prefix
    _reseed()
    return run(fd=fd, worker_id=request.worker_id, function=request.function, entrypoint=request.entrypoint,
               spawn_time=request.spawn_time, parent_pid=server_pid, driver_pid=request.driver_pid,
               inline_max_bytes=request.inline_max_bytes, compress_min_bytes=request.compress_min_bytes)


def _refuse(*, sock: socket.socket, fds: list[int], reason: str) -> None:
    """Answer a request the server will not fork for, closing what came with it; the server goes on."""
    log.error("fork server: refused a request: %s", reason)
    for fd in fds:
        os.close(fd)
    socket.send_fds(sock, [encode(Message(header={"pid": 0, "error": reason}), compress_min_bytes=None)], [])


def _fork_one(*, sock: socket.socket, fd: int, request: SpawnRequest) -> None:
    _import_quietly(request.entrypoint.partition(":")[0])
    server_pid = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:  # EAGAIN/ENOMEM: this request fails, the server does not
        _refuse(sock=sock, fds=[fd], reason=f"fork failed: {exc}")
        return
    if pid == 0:
        code = 1
        try:
            code = _child(server_sock=sock, fd=fd, request=request, server_pid=server_pid)
        except BaseException:  # noqa: BLE001 - a forked child must never return into the server's loop
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(fd)
    pidfd = os.pidfd_open(pid)  # before any _reap: the pid cannot have been reused yet
    try:
        socket.send_fds(sock, [encode(Message(header={"pid": pid, "error": None}), compress_min_bytes=None)], [pidfd])
    finally:
        os.close(pidfd)


def serve(*, sock: socket.socket) -> int:
    """Fork one worker per request until the driver closes its end (0). A request that is not a valid spawn
    request (not a codec frame, a field missing or of the wrong type, no socket attached) is answered with an
    error and forks nothing; the server and its workers go on (nothing in it is ever unpickled)."""
    while True:
        if not select.select([sock], [], [], 1.0)[0]:
            _reap()
            continue
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE_BYTES, 1)
        _reap()
        if not data:
            return 0
        try:
            request = parse_request(data=data)
        except CodecError as exc:
            _refuse(sock=sock, fds=fds, reason=f"not a spawn request: {exc}")
            continue
        if len(fds) != 1:
            _refuse(sock=sock, fds=fds, reason="no socket attached")
            continue
        _fork_one(sock=sock, fd=fds[0], request=request)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nimbus.runtime.forkserver")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--preload", default="")
    args = parser.parse_args(argv)
    set_pdeathsig()
    if os.getppid() != args.parent_pid:
        return 0
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    prepare_template(preload=tuple(filter(None, args.preload.split(","))))
    return serve(sock=socket.socket(fileno=args.fd))


def prepare_template(*, preload: tuple[str, ...]) -> None:
    """What every forked worker inherits: the ``preload`` modules imported and, with torch, its lazy first-step
    imports done (``warm_torch_optimizer``: no autograd, no CUDA, so that forked children can use both)."""
    for module in ["nimbus.runtime.worker", *preload]:
        _import_quietly(module)
    if "torch" in sys.modules:
        from nimbus.runtime.worker import warm_torch_optimizer

        warm_torch_optimizer()


if __name__ == "__main__":
    sys.exit(main())
