"""The driver's side of local workers: spawning them and the warm pool.

``WorkerPool`` (slots, states, deadlines, eviction) starts workers through ``Spawner`` /
``spawn_worker`` (``python -m nimbus.runtime.worker`` over one end of a ``socket.socketpair()``;
nothing is pickled, every frame is a codec frame) and ends them through the janitor module's
``Reaper``. The worker process itself is runtime/worker.py.

Example::

    handle = spawn_worker(worker_id="w1", spec=spec, prefix=run_prefix(), inline_max_bytes=65536,
                          compress_min_bytes=1 << 20)
    # handle.sock speaks codec frames; handle.proc is the Popen
"""


from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nimbus.data.channel import Inbox, body_segment_prefix
from nimbus.liveness import SILENT_BEATS
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.forkserver import ForkedProcess, ForkServer
from nimbus.runtime.interpreter import module_command, worker_env
from nimbus.runtime.janitor import Reaper
from nimbus.runtime.spare_server import park, start_early, take_early

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerHandle:
    """The driver's view of a spawned worker process."""

    worker_id: str
    proc: subprocess.Popen | ForkedProcess
    sock: socket.socket
    spawned_at: float

    @property
    def pid(self) -> int:
        return self.proc.pid


def spawn_worker(*, worker_id: str, spec: FunctionSpec, prefix: str, inline_max_bytes: int,
                 compress_min_bytes: int | None) -> WorkerHandle:
    """Start a worker bound to ``spec``; it reports ``ready`` on the returned socket."""
    parent_sock, child_sock = socket.socketpair()
    spawned_at = time.time()
    argv = [*module_command(module="nimbus.runtime.worker"), "--fd", str(child_sock.fileno()),
            "--worker-id", worker_id, "--function", spec.name, "--entrypoint", spec.entrypoint,
            "--spawn-time", repr(spawned_at), "--parent-pid", str(os.getpid()),
            "--inline-max-bytes", str(inline_max_bytes),
            "--compress-min-bytes", str(-1 if compress_min_bytes is None else compress_min_bytes)]
    try:
        proc = subprocess.Popen(argv, pass_fds=(child_sock.fileno(),), env=worker_env(spec=spec, prefix=prefix),
                                stdin=subprocess.DEVNULL, start_new_session=True)   # signals: see ForkServer._start
    except BaseException:
        parent_sock.close()
        raise
    finally:
        child_sock.close()
    return WorkerHandle(worker_id=worker_id, proc=proc, sock=parent_sock, spawned_at=spawned_at)


class Spawner:
    """Starts workers in order on one long-lived thread: PR_SET_PDEATHSIG fires when the *thread* that
    forked a worker (or the fork server) exits, so they must not be forked by short-lived caller threads.

    ``start_method``: "spawn" (a fresh ``python -m nimbus.runtime.worker`` each) or "fork_server" (forked
    from a template that imported ``preload``, runtime/forkserver.py; the server starts at once, on this
    thread, so its imports overlap the driver's own set-up). ``on_spawned(worker_id, handle, error)`` runs
    on the spawner thread (handle None on error); ``janitor_track(pid)`` learns the fork server's pid.
    """

    def __init__(self, *, prefix: str, inline_max_bytes: int, compress_min_bytes: int | None,
                 on_spawned: Callable[[str, WorkerHandle | None, BaseException | None], None],
                 start_method: str = "spawn", preload: tuple[str, ...] = (),
                 janitor_track: Callable[[int], None] = lambda pid: None) -> None:
        self._options = {"prefix": prefix, "inline_max_bytes": inline_max_bytes,
                         "compress_min_bytes": compress_min_bytes}
        self._on_spawned = on_spawned
        self._server: ForkServer | None = None
        self._closing = False   # close() called: queued spawns are dropped, none is started
        self._queue: queue.SimpleQueue[tuple[str, FunctionSpec] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="nimbus-spawner", daemon=True,
                                        args=(start_method, preload, janitor_track))
        self._thread.start()

    def spawn(self, *, worker_id: str, spec: FunctionSpec) -> None:
        self._queue.put((worker_id, spec))

    def close(self, *, timeout_s: float = 10.0) -> None:
        """Start nothing more: spawns still queued are dropped (reported as errors), one in progress is cut
        short (``ForkServer.interrupt``: no new server either; a reusable server only if the spawn still waits
        after ``timeout_s``, so that it can be parked); then, on the spawner thread, the server is parked or
        stopped (``park``)."""
        self._closing = True
        server = self._server
        if server is not None and not server.reusable:
            server.interrupt()
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=timeout_s)
            if self._thread.is_alive() and server is not None:   # a spawn still waits on the server: cut it short
                server.interrupt()
                self._thread.join(timeout=1.0)

    def _start_server(self, preload: tuple[str, ...], janitor_track: Callable[[int], None]) -> None:
        early = take_early(preload=preload)
        if early is not None:
            if early.adopt(prefix=self._options["prefix"], janitor_track=janitor_track):
                self._server = early
                return
            early.close()
        env = worker_env(spec=FunctionSpec(name="forkserver", entrypoint=""), prefix=self._options["prefix"])
        try:
            self._server = ForkServer(prefix=self._options["prefix"], preload=preload, env=env,
                                      janitor_track=janitor_track)
        except OSError as exc:  # spawns fall back to fresh interpreters
            log.error("cannot start the fork server (%s); spawning workers instead", exc)

    def _spawn(self, *, worker_id: str, spec: FunctionSpec) -> WorkerHandle:
        if self._server is None:
            return spawn_worker(worker_id=worker_id, spec=spec, **self._options)
        proc, sock, spawned_at = self._server.spawn(
            worker_id=worker_id, spec=spec, inline_max_bytes=self._options["inline_max_bytes"],
            compress_min_bytes=self._options["compress_min_bytes"])
        return WorkerHandle(worker_id=worker_id, proc=proc, sock=sock, spawned_at=spawned_at)

    def _run(self, start_method: str, preload: tuple[str, ...], janitor_track: Callable[[int], None]) -> None:
        if start_method == "fork_server":
            self._start_server(preload, janitor_track)
        while (item := self._queue.get()) is not None:
            worker_id, spec = item
            try:
                if self._closing:
                    raise RuntimeError(f"the runtime is shutting down: {worker_id} not started")
                handle, error = self._spawn(worker_id=worker_id, spec=spec), None
            except Exception as exc:  # noqa: BLE001 - reported to the runtime, which retries elsewhere
                log.log(logging.DEBUG if self._closing else logging.ERROR, "cannot start worker %s: %s", worker_id, exc)
                handle, error = None, exc
            self._on_spawned(worker_id, handle, error)
        if self._server is not None:
            park(self._server)


@dataclass(eq=False)
class WorkerSlot:
    """The driver's record of one worker process (mutable; owned by a WorkerPool)."""

    worker_id: str
    spec: FunctionSpec
    prewarm: bool
    requested_at: float
    deadline: float  # monotonic: end of init (starting), of the timeout (busy) or of keep-alive (idle)
    state: str = "starting"  # starting | idle | busy | asleep | dead
    preregistered: bool = False  # sleeps (SIGSTOP) once ready, until placement wakes it
    attempt: Any = None  # the owner's attempt running, or about to run, here
    handle: WorkerHandle | None = None
    init_s: float = 0.0
    exit_seen_at: float | None = None
    affinity: str | None = None  # the request affinity key this worker served last (sticky routing)
    silent_at: float | None = None  # monotonic: a busy worker with no heartbeat since counts as stalled (P5)


def same_pool(a: FunctionSpec, b: FunctionSpec) -> bool:
    """Workers are interchangeable when name, entrypoint and resources match."""
    return (a.name, a.entrypoint, a.resources) == (b.name, b.entrypoint, b.resources)


def idle_of(slots: Iterable[Any], *, spec: FunctionSpec) -> list[Any]:
    """The idle workers of ``spec``'s pool among ``slots``, most recently used first (the latest keep-alive
    deadline), on every backend."""
    idle = [w for w in slots if w.state == "idle" and same_pool(w.spec, spec)]
    return sorted(idle, key=lambda w: w.deadline, reverse=True)


def eviction_victim(slots: Iterable[Any], *, spec: FunctionSpec) -> Any | None:
    """The worker a full pool evicts to start one for ``spec``: the longest-idle worker of another function
    (None: every other worker is busy or starting)."""
    others = [w for w in slots if w.state == "idle" and not same_pool(w.spec, spec)]
    return min(others, key=lambda w: w.deadline) if others else None


class WorkerPool:
    """The driver's warm pool: which workers exist, their states and deadlines; starting, evicting,
    reclaiming and retiring them. Not thread-safe: its owner holds the lock of ``changed`` around
    every call (and wires ``on_spawned``, which runs on the spawner thread, to ``attach``).

    Example::

        pool = WorkerPool(inbox=inbox, changed=threading.Condition(lock), prefix=run_prefix(), max_workers=4,
                          keep_alive_s=600, init_timeout_s=120, inline_max_bytes=65536,
                          compress_min_bytes=1 << 20, on_spawned=on_spawned)
        slot = pool.start(spec=spec, prewarm=True)     # ready later: the owner then calls set_idle(slot)
    """

    def __init__(self, *, inbox: Inbox, changed: threading.Condition, prefix: str, max_workers: int,
                 keep_alive_s: float, init_timeout_s: float, inline_max_bytes: int, compress_min_bytes: int | None,
                 on_spawned: Callable[[str, WorkerHandle | None, BaseException | None], None],
                 start_method: str = "spawn", preload: tuple[str, ...] = ()) -> None:
        self.slots: dict[str, WorkerSlot] = {}
        self.max_workers = max_workers
        self.on_retire: Callable[[WorkerSlot], None] | None = None  # the owner bills a provisioned worker's time
        self._inbox, self._changed, self._prefix = inbox, changed, prefix
        self._keep_alive_s, self._init_timeout_s = keep_alive_s, init_timeout_s
        self._next_id = 0
        self._next_check_at = 0.0  # monotonic time the monitor wakes up next (next_check_s)
        self._reaper = Reaper(prefix=prefix)
        if start_method == "fork_server" and threading.current_thread() is threading.main_thread():
            start_early(preload=preload)   # or the fitting one a previous run parked: the Spawner adopts it
        self._spawner = Spawner(prefix=prefix, inline_max_bytes=inline_max_bytes,
                                compress_min_bytes=compress_min_bytes, on_spawned=on_spawned,
                                start_method=start_method, preload=preload, janitor_track=self._reaper.track_helper)

    @property
    def janitor_pid(self) -> int:
        return self._reaper.janitor_pid

    def busy_cpus(self) -> float:
        return sum(w.spec.resources.cpus for w in self.slots.values() if w.attempt is not None)

    def idle(self, *, spec: FunctionSpec) -> list[WorkerSlot]:
        """Idle workers of ``spec``'s pool, most recently used first."""
        return idle_of(self.slots.values(), spec=spec)

    def make_room(self, *, spec: FunctionSpec) -> bool:
        """True if one more worker may start, evicting the longest-idle worker of another function."""
        if len(self.slots) < self.max_workers:
            return True
        victim = eviction_victim(self.slots.values(), spec=spec)
        if victim is not None:
            self.retire(victim)
        return victim is not None

    def start(self, *, spec: FunctionSpec, prewarm: bool) -> WorkerSlot:
        """Reserve a slot and ask the spawner for its process (call ``make_room`` first)."""
        self._next_id += 1
        slot = WorkerSlot(worker_id=f"{spec.name}-{self._next_id}", spec=spec, prewarm=prewarm,
                          requested_at=time.time(), deadline=time.monotonic() + self._init_timeout_s)
        self.slots[slot.worker_id] = slot
        self._spawner.spawn(worker_id=slot.worker_id, spec=spec)
        self._changed.notify_all()
        return slot

    def attach(self, *, worker_id: str, handle: WorkerHandle) -> bool:
        """A spawned process for ``worker_id``: start receiving from it; False (and killed) if unwanted."""
        self._reaper.adopt(proc=handle.proc, sweep_prefix=body_segment_prefix(prefix=self._prefix, pid=handle.pid))
        slot = self.slots.get(worker_id)
        if slot is None:  # retired (timed out, shut down) while it was spawning
            handle.sock.close()
            self._reaper.kill(proc=handle.proc)
            return False
        slot.handle = handle
        self._inbox.add_source(source=worker_id, sock=handle.sock,
                               segment_prefix=body_segment_prefix(prefix=self._prefix, pid=handle.pid))
        return True

    def set_busy(self, slot: WorkerSlot, *, timeout_s: float) -> None:
        was = slot.state
        slot.state = "busy"
        slot.deadline = time.monotonic() + timeout_s
        self._notify(was=was, deadline=slot.deadline)

    def heard_from(self, slot: WorkerSlot, *, heartbeat_s: float | None) -> None:
        """Dispatch or heartbeat: the worker counts as stalled after SILENT_BEATS intervals of silence."""
        slot.silent_at = None if heartbeat_s is None else time.monotonic() + SILENT_BEATS * heartbeat_s
        if slot.silent_at is not None and slot.silent_at < self._next_check_at:
            self._changed.notify_all()

    def set_idle(self, slot: WorkerSlot) -> None:
        was = slot.state
        slot.attempt = None
        slot.silent_at = None
        slot.state = "idle"
        slot.deadline = time.monotonic() + self._keep_alive_s
        self._notify(was=was, deadline=slot.deadline)

    def _notify(self, *, was: str, deadline: float) -> None:
        """Wake the owner's waiters only when it matters: a worker left "starting" (prewarm waits on that) or a
        deadline falls before the monitor's next check. Waking the monitor on every dispatch and result made it
        take the GIL from the dispatching thread several times a round."""
        if was == "starting" or deadline < self._next_check_at:
            self._changed.notify_all()

    def asleep(self, *, spec: FunctionSpec) -> list[WorkerSlot]:
        """Pre-registered workers of ``spec``'s pool that are stopped, waiting to be woken."""
        return [w for w in self.slots.values() if w.state == "asleep" and same_pool(w.spec, spec)]

    def put_to_sleep(self, slot: WorkerSlot) -> None:
        """SIGSTOP a ready worker: it uses no CPU, has no keep-alive deadline, and is billed nothing until woken."""
        slot.handle.proc.send_signal(signal.SIGSTOP)
        slot.state, slot.deadline = "asleep", float("inf")
        self._changed.notify_all()  # preregister() waits for workers leaving "starting"

    def wake(self, slot: WorkerSlot) -> WorkerSlot:
        """SIGCONT a sleeping worker; it is idle (warm) from now on."""
        slot.handle.proc.send_signal(signal.SIGCONT)
        slot.preregistered = False
        self.set_idle(slot)
        return slot

    def retire(self, slot: WorkerSlot) -> None:
        """Take a worker out of service and SIGKILL it; ``reap`` collects it and sweeps its segments."""
        if slot.state == "dead":
            return
        slot.state = "dead"
        slot.attempt = None
        self.slots.pop(slot.worker_id, None)
        if slot.prewarm and self.on_retire is not None:
            self.on_retire(slot)
        if slot.handle is not None:
            self._inbox.remove_source(source=slot.worker_id)
            self._reaper.kill(proc=slot.handle.proc)
        self._changed.notify_all()

    def exited_silently(self, slot: WorkerSlot, *, now: float, grace_s: float = 2.0) -> bool:
        """True once the process has been gone ``grace_s`` without its socket closing (a forked child
        holds it); socket EOF is the normal signal of a death."""
        if slot.handle is None or slot.handle.proc.poll() is None:
            return False
        slot.exit_seen_at = slot.exit_seen_at or now
        return now - slot.exit_seen_at > grace_s

    def next_check_s(self, *, now: float) -> float:
        self._reaper.reap()
        times = [1.0, *(w.deadline - now for w in self.slots.values()),
                 *(w.silent_at - now for w in self.slots.values() if w.silent_at is not None)]
        times += [0.05] * self._reaper.pending
        wait_s = max(0.001, min(times))
        self._next_check_at = now + wait_s
        return wait_s

    def close(self) -> None:
        """After every slot was retired: stop the spawner, collect the processes, release the janitor."""
        self._spawner.close()
        self._reaper.close(wait_s=5.0)
