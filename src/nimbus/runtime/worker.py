"""A worker process: one warm container for one function.

Driver side: ``WorkerPool`` (the warm pool: slots, states, deadlines, eviction) starts workers
through ``Spawner`` / ``spawn_worker`` (``python -m nimbus.runtime.worker`` over one end of a
``socket.socketpair()``; nothing is pickled, every frame is a codec frame) and ends them through
the janitor module's ``Reaper``. Worker side (``main``), the process:

1. sets ``PR_SET_PDEATHSIG`` = SIGKILL, so it dies with the driver thread that spawned it, and exits
   at once if the driver is already gone; it ignores SIGINT (Ctrl-C is the driver's to handle); on
   Linux it runs under SCHED_BATCH (``_batch_scheduling``: woken workers do not preempt the driver);
2. imports its entrypoint once, runs the module's ``init_worker()`` if it defines one (Lambda's init
   phase: imports and set-up every first invocation would otherwise pay), and reports ``ready`` with
   ``init_s`` (spawn -> imported and initialised) or the error;
3. serves invocations one at a time: ``fn(context=FunctionContext(...), request=Message)`` with one
   ``context.cache`` kept across invocations (warm state), and reports each attempt's outcome, start
   and end wall times, and on error the exception type, ``nimbus_retryable`` and traceback;
4. exits when its socket hits EOF, and exits with status 2 on a frame that is not a valid codec or
   channel frame (P11), never interpreting it.

``torch.set_num_threads(OMP_NUM_THREADS)`` is called only if the function imported torch: this module
never imports torch, so an empty function's worker stays light.

Example (driver side)::

    handle = spawn_worker(worker_id="w1", spec=spec, prefix=run_prefix(), inline_max_bytes=65536,
                          compress_min_bytes=1 << 20)
    # handle.sock speaks codec frames; handle.proc is the Popen
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from nimbus.data.channel import Inbox, Outbox, body_segment_prefix, open_frame
from nimbus.data.codec import Message, encoded_size
from nimbus.data.shm import PREFIX_ENV, streaming_copy_env
from nimbus.errors import CodecError
from nimbus.runtime.base import FunctionContext, FunctionSpec
from nimbus.runtime.janitor import Reaper
from nimbus.runtime.transport import recv_frame

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1
INIT_HOOK = "init_worker"  # optional function of an entrypoint's module, run once when a worker starts


@dataclass(frozen=True)
class WorkerHandle:
    """The driver's view of a spawned worker process."""

    worker_id: str
    proc: subprocess.Popen
    sock: socket.socket
    spawned_at: float

    @property
    def pid(self) -> int:
        return self.proc.pid


def worker_env(*, spec: FunctionSpec, prefix: str) -> dict[str, str]:
    """The driver's environment plus the run's segment prefix, thread limits from ``spec`` and streaming
    copies of large bodies (``shm.streaming_copy_env``)."""
    env = streaming_copy_env(dict(os.environ))
    threads = str(max(1, int(spec.resources.cpus)))
    env.update({PREFIX_ENV: prefix, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
    return env


def spawn_worker(*, worker_id: str, spec: FunctionSpec, prefix: str, inline_max_bytes: int,
                 compress_min_bytes: int | None) -> WorkerHandle:
    """Start a worker bound to ``spec``; it reports ``ready`` on the returned socket."""
    parent_sock, child_sock = socket.socketpair()
    spawned_at = time.time()
    argv = [sys.executable, "-m", "nimbus.runtime.worker", "--fd", str(child_sock.fileno()),
            "--worker-id", worker_id, "--function", spec.name, "--entrypoint", spec.entrypoint,
            "--spawn-time", repr(spawned_at), "--parent-pid", str(os.getpid()),
            "--inline-max-bytes", str(inline_max_bytes),
            "--compress-min-bytes", str(-1 if compress_min_bytes is None else compress_min_bytes)]
    try:
        proc = subprocess.Popen(argv, pass_fds=(child_sock.fileno(),), env=worker_env(spec=spec, prefix=prefix),
                                stdin=subprocess.DEVNULL)
    except BaseException:
        parent_sock.close()
        raise
    finally:
        child_sock.close()
    return WorkerHandle(worker_id=worker_id, proc=proc, sock=parent_sock, spawned_at=spawned_at)


class Spawner:
    """Starts workers in order on one long-lived thread: PR_SET_PDEATHSIG fires when the *thread* that
    forked a worker exits, so workers must not be forked by short-lived caller threads.

    ``on_spawned(worker_id, handle, error)`` runs on the spawner thread (handle None on error).
    """

    def __init__(self, *, prefix: str, inline_max_bytes: int, compress_min_bytes: int | None,
                 on_spawned: Callable[[str, WorkerHandle | None, BaseException | None], None]) -> None:
        self._options = {"prefix": prefix, "inline_max_bytes": inline_max_bytes,
                         "compress_min_bytes": compress_min_bytes}
        self._on_spawned = on_spawned
        self._queue: queue.SimpleQueue[tuple[str, FunctionSpec] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="nimbus-spawner", daemon=True)
        self._thread.start()

    def spawn(self, *, worker_id: str, spec: FunctionSpec) -> None:
        self._queue.put((worker_id, spec))

    def close(self, *, timeout_s: float = 10.0) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            worker_id, spec = item
            try:
                handle, error = spawn_worker(worker_id=worker_id, spec=spec, **self._options), None
            except Exception as exc:  # noqa: BLE001 - reported to the runtime, which retries elsewhere
                log.error("cannot start worker %s: %s", worker_id, exc)
                handle, error = None, exc
            self._on_spawned(worker_id, handle, error)


@dataclass(eq=False)
class WorkerSlot:
    """The driver's record of one worker process (mutable; owned by a WorkerPool)."""

    worker_id: str
    spec: FunctionSpec
    prewarm: bool
    requested_at: float
    deadline: float  # monotonic: end of init (starting), of the timeout (busy) or of keep-alive (idle)
    state: str = "starting"  # starting | idle | busy | dead
    attempt: Any = None  # the owner's attempt running, or about to run, here
    handle: WorkerHandle | None = None
    init_s: float = 0.0
    exit_seen_at: float | None = None
    affinity: str | None = None  # the request affinity key this worker served last (sticky routing)


def same_pool(a: FunctionSpec, b: FunctionSpec) -> bool:
    """Workers are interchangeable when name, entrypoint and resources match."""
    return (a.name, a.entrypoint, a.resources) == (b.name, b.entrypoint, b.resources)


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
                 on_spawned: Callable[[str, WorkerHandle | None, BaseException | None], None]) -> None:
        self.slots: dict[str, WorkerSlot] = {}
        self.max_workers = max_workers
        self._inbox, self._changed, self._prefix = inbox, changed, prefix
        self._keep_alive_s, self._init_timeout_s = keep_alive_s, init_timeout_s
        self._next_id = 0
        self._next_check_at = 0.0  # monotonic time the monitor wakes up next (next_check_s)
        self._reaper = Reaper(prefix=prefix)
        self._spawner = Spawner(prefix=prefix, inline_max_bytes=inline_max_bytes,
                                compress_min_bytes=compress_min_bytes, on_spawned=on_spawned)

    @property
    def janitor_pid(self) -> int:
        return self._reaper.janitor_pid

    def busy_cpus(self) -> float:
        return sum(w.spec.resources.cpus for w in self.slots.values() if w.attempt is not None)

    def idle(self, *, spec: FunctionSpec) -> list[WorkerSlot]:
        """Idle workers of ``spec``'s pool, most recently used first."""
        idle = [w for w in self.slots.values() if w.state == "idle" and same_pool(w.spec, spec)]
        return sorted(idle, key=lambda w: w.deadline, reverse=True)

    def make_room(self, *, spec: FunctionSpec) -> bool:
        """True if one more worker may start, evicting the longest-idle worker of another function."""
        if len(self.slots) < self.max_workers:
            return True
        others = [w for w in self.slots.values() if w.state == "idle" and not same_pool(w.spec, spec)]
        if others:
            self.retire(min(others, key=lambda w: w.deadline))
        return bool(others)

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

    def set_idle(self, slot: WorkerSlot) -> None:
        was = slot.state
        slot.attempt = None
        slot.state = "idle"
        slot.deadline = time.monotonic() + self._keep_alive_s
        self._notify(was=was, deadline=slot.deadline)

    def _notify(self, *, was: str, deadline: float) -> None:
        """Wake the owner's waiters only when it matters: a worker left "starting" (prewarm waits on that) or a
        deadline falls before the monitor's next check. Waking the monitor on every dispatch and result made it
        take the GIL from the dispatching thread several times a round."""
        if was == "starting" or deadline < self._next_check_at:
            self._changed.notify_all()

    def retire(self, slot: WorkerSlot) -> None:
        """Take a worker out of service and SIGKILL it; ``reap`` collects it and sweeps its segments."""
        if slot.state == "dead":
            return
        slot.state = "dead"
        slot.attempt = None
        self.slots.pop(slot.worker_id, None)
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
        times = [1.0, *(w.deadline - now for w in self.slots.values())] + [0.05] * self._reaper.pending
        wait_s = max(0.001, min(times))
        self._next_check_at = now + wait_s
        return wait_s

    def close(self) -> None:
        """After every slot was retired: stop the spawner, collect the processes, release the janitor."""
        self._spawner.close()
        self._reaper.close(wait_s=5.0)


def error_report(exc: BaseException) -> dict[str, Any]:
    """How a worker describes an exception to the driver."""
    return {"type": type(exc).__name__, "retryable": bool(getattr(exc, "nimbus_retryable", True)),
            "traceback": "".join(traceback.format_exception(exc))}


def _batch_scheduling() -> None:
    """Linux SCHED_BATCH: same CPU share as before, but a woken worker does not preempt the running task.
    Without it, the driver's first dispatch of a round woke an actor that preempted the driver before it
    had dispatched the others (~1-2 ms a round on a busy machine); the worker now waits for the driver's
    next block (microseconds later). Needs no privileges; skipped where unsupported."""
    if hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass


def _set_pdeathsig() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _load(entrypoint: str) -> Callable[..., Message]:
    module_name, _, attr = entrypoint.partition(":")
    module = importlib.import_module(module_name)
    fn = getattr(module, attr or "main")
    if not callable(fn):
        raise TypeError(f"entrypoint {entrypoint!r} is not callable")
    init = getattr(module, INIT_HOOK, None)
    if callable(init):  # Lambda's init phase: set-up the first invocation would pay, done (and billed) at start
        init()
    return fn


_torch_threads_set = False


def _limit_torch_threads() -> None:
    """Apply OMP_NUM_THREADS to torch once the function has imported it (never import it here)."""
    global _torch_threads_set
    if not _torch_threads_set and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        _torch_threads_set = True


def _invoke(*, fn: Callable[..., Message], context: FunctionContext, request: Message) -> tuple[Message, dict]:
    start_at = time.time()
    try:
        result = fn(context=context, request=request)
        if not isinstance(result, Message):
            raise TypeError(f"function returned {type(result).__name__}, expected nimbus Message")
        encoded_size(result)  # unsupported dtypes fail here, as the function's error
        outcome, error = "ok", None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - reported to the driver
        result, outcome, error = Message(), "error", error_report(exc)
    return result, {"op": "result", "invocation_id": context.invocation_id, "attempt": context.attempt,
                    "start_at": start_at, "end_at": time.time(), "outcome": outcome, "error": error}


def serve(*, sock: socket.socket, outbox: Outbox, fn: Callable[..., Message], worker_id: str,
          function: str, driver_prefix: str) -> int:
    """Answer invocations until EOF (0) or a bad frame (2)."""
    cache: dict[str, Any] = {}
    first = True
    while True:
        try:
            frame = recv_frame(sock=sock)
            if frame is None:
                return 0
            envelope = open_frame(frame=frame, source="driver", unlink_segment=False, allowed_prefix=driver_prefix)
        except CodecError as exc:
            log.error("worker %s: rejected a frame from the driver: %s", worker_id, exc)
            return 2
        except OSError:
            return 0
        tag = envelope.tag
        context = FunctionContext(worker_id=worker_id, function=function, invocation_id=str(tag["invocation_id"]),
                                  attempt=int(tag["attempt"]), cache=cache)
        result, report = _invoke(fn=fn, context=context, request=envelope.message)
        report["first"] = first
        first = False
        del envelope
        _limit_torch_threads()
        outbox.send(message=result, tag=report)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nimbus.runtime.worker")
    for name in ("--worker-id", "--function", "--entrypoint"):
        parser.add_argument(name, required=True)
    for name in ("--fd", "--parent-pid", "--inline-max-bytes", "--compress-min-bytes"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--spawn-time", type=float, required=True)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    _set_pdeathsig()
    _batch_scheduling()
    if os.getppid() != args.parent_pid:
        return 0  # the driver died before we could ask to die with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    sock = socket.socket(fileno=args.fd)
    sock.set_inheritable(False)  # a subprocess of the function must not keep the driver's EOF from us
    prefix = os.environ[PREFIX_ENV]
    # results leave from the serving thread itself (direct_any): it has nothing else to do until they are out
    outbox = Outbox(sock=sock, prefix=prefix, inline_max_bytes=args.inline_max_bytes,
                    compress_min_bytes=None if args.compress_min_bytes < 0 else args.compress_min_bytes,
                    direct_any=True)
    try:
        fn, error = _load(args.entrypoint), None
    except Exception as exc:  # noqa: BLE001 - the driver bills and retries it
        fn, error = None, error_report(exc)
    _limit_torch_threads()
    outbox.send(message=Message(), tag={"op": "ready", "init_s": time.time() - args.spawn_time,
                                        "pid": os.getpid(), "error": error})
    code = 1
    if fn is not None:
        code = serve(sock=sock, outbox=outbox, fn=fn, worker_id=args.worker_id, function=args.function,
                     driver_prefix=body_segment_prefix(prefix=prefix, pid=args.parent_pid))
    outbox.close(timeout_s=5.0)
    return code


if __name__ == "__main__":
    sys.exit(main())
