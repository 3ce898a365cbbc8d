"""The fork server's own process (runtime/forkserver.py is the driver's side): a template that has imported the
heavy modules once (``prepare_template``) and forks one worker per spawn request (``serve``).

A spawn request is one codec frame (``SpawnRequest``: worker id, function, entrypoint, spawn time, thread count,
frame limits) with the worker's end of a fresh socketpair attached as ``SCM_RIGHTS``; ``parse_request`` reads it
and refuses anything else (not a codec frame, a field missing or mistyped) without unpickling a byte. The server
imports the entrypoint's module the first time it sees it, forks, and answers ``{pid, error}`` with the child's
pidfd attached; the child closes the server's socket, takes its thread limits, reseeds numpy and torch as a fresh
process would have them (``_reseed``) and runs ``worker.run``. The server reaps its children.

Started by ``ForkServer`` as ``python -P -m nimbus.runtime.fork_template --fd N --parent-pid P --preload m1,m2``, or,
for ``nimbus train`` (``ForkServer(fork_driver=True)``), forked from the driver once it has imported the preload
itself (``run_forked``: no second import of torch); it dies with the thread that started it (``PR_SET_PDEATHSIG``).

Example (in the template process)::

    prepare_template(preload=("numpy", "torch"))
    serve(sock=socket.socket(fileno=fd))     # returns 0 when the driver closes its end
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
import sys
import traceback
from dataclasses import dataclass, fields

from nimbus.data.codec import Message, decode, encode
from nimbus.data.shm import PREFIX_ENV
from nimbus.errors import CodecError
from nimbus.runtime.worker import set_pdeathsig

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 1 << 16


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


def _field(*, header: dict, name: str, kind: str) -> str | int | float:
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
    parser = argparse.ArgumentParser(prog="nimbus.runtime.fork_template")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--preload", default="")
    args = parser.parse_args(argv)
    return _run(fd=args.fd, parent_pid=args.parent_pid, preload=tuple(filter(None, args.preload.split(","))))


def _run(*, fd: int, parent_pid: int, preload: tuple[str, ...]) -> int:
    set_pdeathsig()
    if os.getppid() != parent_pid:
        return 0
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    prepare_template(preload=preload)
    return serve(sock=socket.socket(fileno=fd))


def run_forked(*, fd: int, parent_pid: int, env: dict[str, str], preload: tuple[str, ...]) -> int:
    """The template as a fork of the driver (``ForkServer(fork_driver=True)``: a single-threaded driver that has
    imported ``preload`` itself), first made what ``main``'s fresh interpreter would be: its own session, stdin from
    /dev/null, no file descriptor but stdout, stderr and ``fd`` (Popen's ``close_fds``), the server's environment,
    nothing of the current directory on the path (``-P``, runtime/interpreter.py) and no signal handler of the
    driver's. Then it serves as ``main`` does. Returns the exit status; the caller ``os._exit``s with it."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.closerange(3, fd)
    os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
    os.environ.clear()
    os.environ.update(env)
    if not sys.flags.safe_path and sys.path:
        del sys.path[0]   # what the interpreter put first: the script's folder, or the current directory for -m/-c
    for sig in signal.valid_signals():
        if callable(signal.getsignal(sig)):   # a Python handler the driver installed (SIGINT's is replaced in _run)
            signal.signal(sig, signal.SIG_DFL)
    return _run(fd=fd, parent_pid=parent_pid, preload=preload)


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
