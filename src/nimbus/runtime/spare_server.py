"""The fork server a process keeps between runs (docs/artos.md, "Fork server"): at most one, on the main
thread, whose PR_SET_PDEATHSIG ties it to the driver for the process's life. ``start_early`` starts it (or keeps
the one parked if it still fits) before a run needs it, so that the template's imports overlap the driver's own;
the run's Spawner adopts it (``take_early``) and, at the run's end, ``park`` keeps it for the next run of the process
or closes it; ``close_early`` (at exit) closes the one kept.

Example::

    start_early(preload=TRAINING_PRELOAD)          # nimbus train, or a local runtime built on the main thread
    server = take_early(preload=TRAINING_PRELOAD)  # the run's Spawner (None: start its own)
    park(server)                                   # at the run's end
"""

from __future__ import annotations

import atexit
import os
import threading

# Sets KMP_DUPLICATE_LIB_OK on import (os.environ.setdefault); the driver imports it later anyway (its workers' thread
# caps), so without this a server started before that import never fit the run's environment (``_fits``), and every
# `nimbus train` started a second template. Imported here, the variable is in every server's environment from the start.
import threadpoolctl  # noqa: F401

from nimbus.data.shm import PREFIX_ENV
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.forkserver import ForkServer
from nimbus.runtime.interpreter import worker_env

_early: dict[str, ForkServer] = {}   # "server": a main-thread server no run holds now (started early or parked)
_early_lock = threading.Lock()
ENV_NOT_COMPARED = ("PYTEST_CURRENT_TEST",)   # pytest's label of the running test: it changes with every test


def _server_env() -> dict[str, str]:
    """A fork server's environment as the driver's is now; each request carries the run's prefix."""
    env = worker_env(spec=FunctionSpec(name="forkserver", entrypoint=""), prefix="")
    env.pop(PREFIX_ENV)
    return env


def _fits(server: ForkServer, *, preload: tuple[str, ...]) -> bool:
    """Its workers would be what a new server's are: the same preload, and the driver's environment and working
    directory as they are now (a variable set since, e.g. a fault to inject, must reach the workers, and a
    relative path must mean what it means to the driver)."""
    def compared(env: dict[str, str]) -> dict[str, str]:
        return {key: value for key, value in env.items() if key not in ENV_NOT_COMPARED}
    return (server.preload == preload and compared(server.env) == compared(_server_env())
            and server.cwd == os.getcwd() and server.reusable)


def start_early(*, preload: tuple[str, ...], fork_driver: bool = False) -> None:
    """Have a fork server on the main thread for the next run: the one a previous run of this process parked
    (``park``) if it fits (``_fits``), else a new one, started now, so that its template's imports (torch,
    gymnasium: seconds) overlap the driver's own imports and set-up (``nimbus train``; a local runtime built on
    the main thread calls it too). The first fork-server Spawner with the same ``preload`` adopts it
    (``ForkServer.adopt``: the run's prefix goes to each worker with its request, the run's janitor learns the
    pid); one nobody adopts is closed at exit. Started on the calling thread, whose end would kill it
    (PR_SET_PDEATHSIG): call it from the main thread. ``fork_driver`` (``nimbus train``, before it starts any
    thread): this process imports ``preload`` and forks itself into the template, instead of a fresh interpreter
    importing it all again (``ForkServer``; the fresh one when another thread runs)."""
    with _early_lock:
        old = _early.get("server")
        if old is not None and _fits(old, preload=preload):
            return
        if old is not None:
            _early.pop("server").close()
        _early["server"] = ForkServer(prefix="", preload=preload, env=_server_env(), janitor_track=lambda pid: None,
                                      fork_driver=fork_driver)


def take_early(*, preload: tuple[str, ...]) -> ForkServer | None:
    with _early_lock:
        server = _early.get("server")
        if server is None or not _fits(server, preload=preload):
            return None
        return _early.pop("server")


def park(server: ForkServer) -> None:
    """At a run's end: keep a reusable server (``ForkServer.reusable``) for the next run of this process, its
    template warm (no import of torch again: ~3 CPU-seconds a run), or close it. One is kept at most."""
    if server.reusable and server.adopt(prefix="", janitor_track=lambda pid: None):
        with _early_lock:
            if "server" not in _early:
                _early["server"] = server
                return
    server.close()


def close_early() -> None:
    """Close the server kept, if any (at exit; a test that must not leave one for the next)."""
    with _early_lock:
        server = _early.pop("server", None)
    if server is not None:
        server.close()


atexit.register(close_early)   # one kept or started early and never adopted dies with the process, not after it
