"""A worker process: one warm container for one function (the driver's side is runtime/pool.py).

The process (``main``):

1. sets ``PR_SET_PDEATHSIG`` = SIGKILL, so it dies with the driver thread that spawned it, and exits
   at once if the driver is already gone; it ignores SIGINT (Ctrl-C is the driver's to handle); on
   Linux it runs under SCHED_BATCH (``_batch_scheduling``: woken workers do not preempt the driver);
2. imports its entrypoint once, runs the module's ``init_worker()`` if it defines one (Lambda's init
   phase: imports and set-up every first invocation would otherwise pay), and reports ``ready`` with
   ``init_s`` (spawn -> imported and initialised) or the error;
3. serves invocations one at a time: ``fn(context=FunctionContext(...), request=Message)`` with one
   ``context.cache`` kept across invocations (warm state), and reports each attempt's outcome, start
   and end wall times, and on error the exception type, its failure kind and traceback; results
   leave from the serving thread itself;
4. forwards the function's progress beats (nimbus/liveness.py) as ``heartbeat`` frames while an
   invocation that asked for them (``heartbeat_s`` in its tag) runs;
5. exits when its socket hits EOF, and exits with status 2 on a frame that is not a valid codec or
   channel frame (P11), never interpreting it.

``cpus`` caps the function's threads, so that what is billed is what runs (``OMP_NUM_THREADS`` = max(1,
floor(cpus)), set by the pool, the fork server and Ray): once numpy or torch is loaded, threadpoolctl sets every
BLAS and OpenMP pool to that many threads (a forked worker's pools were sized by the template, not by its
spec), and ``torch.set_num_threads`` is set to it and clamped to it for good, so a function asking for more
(a learner's ``torch_threads``) gets at most ``cpus``. Checked at ready and after each invocation until done:
this module never imports torch or numpy, so an empty function's worker stays light.
"""


from __future__ import annotations

import argparse
import ctypes
import importlib
import logging
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from nimbus import liveness
from nimbus.data.channel import Outbox, body_segment_prefix, open_frame
from nimbus.data.codec import Message, encoded_size
from nimbus.data.shm import PREFIX_ENV
from nimbus.data.transport import recv_frame
from nimbus.errors import CodecError
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.devices import lease_ended, lease_started
from nimbus.runtime.faults import FATAL, failure_kind

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1
INIT_HOOK = "init_worker"  # optional function of an entrypoint's module, run once when a worker starts


def error_report(exc: BaseException) -> dict[str, Any]:
    """How a worker describes an exception to the driver: its type, traceback and ``kind`` (how it is
    retried: runtime/faults.py ``failure_kind``)."""
    kind = failure_kind(exc)
    return {"type": type(exc).__name__, "retryable": kind != FATAL, "kind": kind,
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


def set_pdeathsig() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def load_entrypoint(entrypoint: str) -> Callable[..., Message]:
    """Import ``package.module:callable`` and run the module's ``INIT_HOOK`` if it has one (a cold start)."""
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
_pools_capped = False


def _thread_cap() -> int:
    return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))


def _cap_pools() -> None:
    """Every BLAS/OpenMP pool loaded so far at ``cpus`` threads (threadpoolctl), once numpy or torch is loaded."""
    global _pools_capped
    if not _pools_capped and ("numpy" in sys.modules or "torch" in sys.modules):
        import threadpoolctl

        threadpoolctl.threadpool_limits(limits=_thread_cap())
        _pools_capped = True


def _clamp_torch_threads(torch: Any) -> None:
    """``torch.set_num_threads(n)`` sets min(n, cap) from now on in this worker (module docstring)."""
    original, cap = torch.set_num_threads, _thread_cap()

    def set_num_threads(n: int) -> None:
        original(max(1, min(int(n), cap)))

    torch.set_num_threads = set_num_threads


def limit_torch_threads() -> None:
    """Cap the function's threads at ``cpus`` once it has imported numpy or torch (never import them here), and
    make every optimizer step a progress heartbeat (liveness.py)."""
    global _torch_threads_set
    _cap_pools()
    if not _torch_threads_set and "torch" in sys.modules:
        torch = sys.modules["torch"]
        _clamp_torch_threads(torch)
        torch.set_num_threads(_thread_cap())
        optimizer = importlib.import_module("torch.optim.optimizer")
        optimizer.register_optimizer_step_post_hook(lambda *_: liveness.beat())
        warm_torch_optimizer()
        _torch_threads_set = True


def warm_torch_optimizer() -> None:
    """One optimizer step on a scalar: torch imports its compiler stack lazily on the first ``step()`` (seconds:
    torch._dynamo, sympy), which belongs in the init phase, not in a learner's first invocation (where it reads
    as a stall). Fork-safe, so the fork server's template runs it too: the gradient is assigned, not computed
    (a backward in a process that later forks starts autograd's device threads on a CUDA machine, and every
    forked child's own backward then fails), and nothing in it touches CUDA (tests/unit/runtime/test_warmup.py)."""
    torch = sys.modules["torch"]
    weight = torch.zeros(1, requires_grad=True)
    weight.grad = torch.zeros(1)
    torch.optim.SGD([weight], lr=0.0).step()


def _forward_beats(*, outbox: Outbox, tag: dict) -> None:
    """While this invocation runs, progress beats go to the driver as ``heartbeat`` frames (P5)."""
    interval_s = tag.get("heartbeat_s")
    if interval_s is None:
        liveness.install(send=None)
        return
    beat_tag = {"op": "heartbeat", "invocation_id": tag["invocation_id"], "attempt": tag["attempt"]}
    liveness.install(send=lambda: outbox.send(message=Message(), tag=beat_tag), interval_s=float(interval_s))


def invoke_function(*, fn: Callable[..., Message], context: FunctionContext,
                    request: Message) -> tuple[Message, dict]:
    """Run one attempt; returns the result (empty on error) and its report (outcome, times, error)."""
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


def _lease_started(*, device: str | None) -> None:
    try:
        lease_started(device=device)
    except Exception:  # noqa: BLE001 - the function then fails on the device itself, with its own error
        log.exception("could not reset the peak memory of %s", device)


def _lease_ended(*, device: str | None, cache: dict[str, Any]) -> int | None:
    """The lease's peak device memory; the function's models leave the device (runtime/devices.py). A failure
    to offload drops the warm cache (its next invocation rebuilds it) rather than keep the device."""
    try:
        return lease_ended(device=device, cache=cache)
    except Exception:  # noqa: BLE001 - the device must be left whatever the function left behind
        log.exception("could not move the warm cache off %s; dropping it", device)
        cache.clear()
        return None


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
                                  attempt=int(tag["attempt"]), cache=cache, device=tag.get("device"))
        _forward_beats(outbox=outbox, tag=tag)
        _lease_started(device=context.device)
        result, report = invoke_function(fn=fn, context=context, request=envelope.message)
        report["device_peak_bytes"] = _lease_ended(device=context.device, cache=cache)
        liveness.install(send=None)
        report["first"] = first
        first = False
        del envelope
        limit_torch_threads()
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
    return run(fd=args.fd, worker_id=args.worker_id, function=args.function, entrypoint=args.entrypoint,
               spawn_time=args.spawn_time, parent_pid=args.parent_pid, driver_pid=args.parent_pid,
               inline_max_bytes=args.inline_max_bytes, compress_min_bytes=args.compress_min_bytes)


def run(*, fd: int, worker_id: str, function: str, entrypoint: str, spawn_time: float, parent_pid: int,
        driver_pid: int, inline_max_bytes: int, compress_min_bytes: int) -> int:
    """The worker's life on socket ``fd`` (see the module docstring). ``parent_pid``: the process it dies
    with (the driver, or the fork server that forked it); ``driver_pid``: whose request segments it may
    open. ``compress_min_bytes`` < 0 means never compress."""
    set_pdeathsig()
    _batch_scheduling()
    if os.getppid() != parent_pid:
        return 0  # the parent died before we could ask to die with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    sock = socket.socket(fileno=fd)
    sock.set_inheritable(False)  # a subprocess of the function must not keep the driver's EOF from us
    prefix = os.environ[PREFIX_ENV]
    # results leave from the serving thread itself (direct_any): it has nothing else to do until they are out
    outbox = Outbox(sock=sock, prefix=prefix, inline_max_bytes=inline_max_bytes,
                    compress_min_bytes=None if compress_min_bytes < 0 else compress_min_bytes, direct_any=True)
    try:
        fn, error = load_entrypoint(entrypoint), None
    except Exception as exc:  # noqa: BLE001 - the driver bills and retries it
        fn, error = None, error_report(exc)
    limit_torch_threads()
    outbox.send(message=Message(), tag={"op": "ready", "init_s": time.time() - spawn_time,
                                        "pid": os.getpid(), "error": error})
    code = 1
    if fn is not None:
        code = serve(sock=sock, outbox=outbox, fn=fn, worker_id=worker_id, function=function,
                     driver_prefix=body_segment_prefix(prefix=prefix, pid=driver_pid))
    outbox.close(timeout_s=5.0)
    return code


if __name__ == "__main__":
    sys.exit(main())
