"""Small functions for tests and benchmarks, addressable as ``"nimbus.runtime.builtin:<name>"``.

Every function has the runtime's signature ``fn(*, context, request) -> Message``. Those that tests
inspect answer with ``pid``, ``worker_id`` and ``attempt`` in the result header.

Example::

    spec = FunctionSpec(name="sleep", entrypoint="nimbus.runtime.builtin:sleep", timeout_s=2.0)
    runtime.invoke(spec=spec, request=Message(header={"seconds": 0.1})).result()
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from nimbus import liveness
from nimbus.data.codec import Message
from nimbus.data.store import KeyNotFound
from nimbus.errors import EnvContractError
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.faults import InjectedFault

_ERRORS: dict[str, type[Exception]] = {
    "RuntimeError": RuntimeError, "ValueError": ValueError, "EnvContractError": EnvContractError,
}


def _who(context: FunctionContext, **extra: Any) -> dict[str, Any]:
    return {"pid": os.getpid(), "worker_id": context.worker_id, "attempt": context.attempt, **extra}


def empty(*, context: FunctionContext, request: Message) -> Message:
    """Nothing in, nothing out: the runtime's own overhead."""
    return Message()


def echo(*, context: FunctionContext, request: Message) -> Message:
    """Return the request unchanged."""
    return request


def counter(*, context: FunctionContext, request: Message) -> Message:
    """Count this worker's calls in ``context.cache`` (warm state survives between invocations)."""
    context.cache["calls"] = context.cache.get("calls", 0) + 1
    return Message(header=_who(context, calls=context.cache["calls"]))


def introspect(*, context: FunctionContext, request: Message) -> Message:
    """Report the worker's environment: thread limit, segment prefix, whether torch got imported, its import path,
    and the variables ``header["variables"]`` names."""
    return Message(header=_who(context, torch_loaded="torch" in sys.modules,
                               omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
                               shm_prefix=os.environ.get("NIMBUS_SHM_PREFIX"), sys_path=list(sys.path),
                               variables={name: os.environ.get(name) for name in request.header.get("variables", [])}))


def sleep(*, context: FunctionContext, request: Message) -> Message:
    """Sleep ``header["seconds"]`` (or ``header["attempt_seconds"][attempt - 1]`` when given).

    With ``header["pid_path"]`` the worker's pid is written there first (so a test can kill it).
    """
    header = request.header
    seconds = float(header.get("seconds", 0.0))
    per_attempt = header.get("attempt_seconds")
    if per_attempt and context.attempt <= len(per_attempt):
        seconds = float(per_attempt[context.attempt - 1])
    if "pid_path" in header:   # whole or absent: written beside, then renamed (a reader never sees an empty file)
        pid_path = Path(header["pid_path"])
        partial = pid_path.with_name(f".{pid_path.name}.{os.getpid()}")
        partial.write_text(str(os.getpid()))
        os.replace(partial, pid_path)
    time.sleep(seconds)
    return Message(header=_who(context, slept_s=seconds, device=context.device))


def beating(*, context: FunctionContext, request: Message) -> Message:
    """Work for ``header["seconds"]``, reporting progress (``liveness.beat``) every ``header["every_s"]``."""
    end = time.monotonic() + float(request.header["seconds"])
    while time.monotonic() < end:
        time.sleep(float(request.header.get("every_s", 0.05)))
        liveness.beat()
    return Message(header=_who(context))


def optimizer_steps(*, context: FunctionContext, request: Message) -> Message:
    """Take torch SGD steps for ``header["seconds"]`` without calling ``beat`` itself: its progress shows only
    through the worker's optimizer hook (a learner's). Imports torch here, so other builtins stay light."""
    import torch

    weight = torch.zeros(4, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.01)
    end, steps = time.monotonic() + float(request.header["seconds"]), 0
    while time.monotonic() < end:
        optimizer.zero_grad()
        (weight - 1.0).square().sum().backward()
        optimizer.step()
        steps += 1
        time.sleep(0.01)
    return Message(header=_who(context, steps=steps))


def hessian_probe(*, context: FunctionContext, request: Message) -> Message:
    """Nitro's Hessian probe (analysis/hessian.py) on ``header["num_params"]`` parameters, where every backward
    node waits ``header["hvp_delay_s"]``: a stand-in for a large network's slow Hessian-vector products. Calls
    no ``beat`` itself (the probe's own progress is what liveness sees). Imports torch here."""
    import torch

    from nimbus.analysis.hessian import extreme_eigenvalues

    delay_s = float(request.header["hvp_delay_s"])

    class SlowIdentity(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            time.sleep(delay_s)
            return SlowIdentity.apply(grad)  # differentiable: the HVP's second backward waits too

    weight = torch.linspace(-1.0, 1.0, int(request.header["num_params"]), requires_grad=True)
    scale = torch.linspace(-1.0, 2.0, weight.numel())

    def objective() -> torch.Tensor:
        y = SlowIdentity.apply(weight)
        return (scale * y * y).sum()

    probe = extreme_eigenvalues(loss_fn=objective, params=[weight],
                                max_iterations=int(request.header["max_iterations"]))
    return Message(header=_who(context, num_hvps=probe.num_hvps, probe_s=probe.seconds,
                               lambda_max=probe.lambda_max, lambda_min=probe.lambda_min))


def _bump(path: Path) -> int:
    """Increment the counter file at ``path`` (atomically across processes); returns the new value."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.read(fd, 64)
        value = int(raw) + 1 if raw.strip() else 1
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str(value).encode())
        os.fsync(fd)
        return value
    finally:
        os.close(fd)


def fail_first_attempts(*, context: FunctionContext, request: Message) -> Message:
    """Raise while the counter file ``header["counter_path"]`` shows at most ``header["failures"]``
    calls (the counter survives worker restarts), then return ``header["rows"]`` float32 rows."""
    header = request.header
    calls = _bump(Path(header["counter_path"]))
    if calls <= int(header["failures"]):
        raise InjectedFault(f"fail_first_attempts: planned failure {calls} of {header['failures']}")
    rows = int(header.get("rows", 1))
    data = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    return Message(header=_who(context, calls=calls), arrays={"rows": data})


def raise_error(*, context: FunctionContext, request: Message) -> Message:
    """Raise ``header["error"]`` (RuntimeError, ValueError or EnvContractError) every time."""
    name = request.header.get("error", "RuntimeError")
    raise _ERRORS[name](f"raise_error: {name} on attempt {context.attempt}")


def crash(*, context: FunctionContext, request: Message) -> Message:
    """Die on the attempts in ``header["attempts"]``: ``mode`` "sigkill" (default) or "exit" (os._exit)."""
    if context.attempt in request.header.get("attempts", [1]):
        if request.header.get("mode", "sigkill") == "exit":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    return Message(header=_who(context))


def big(*, context: FunctionContext, request: Message) -> Message:
    """Return ``header["nbytes"]`` bytes: zeros (compressible) or, with ``header["random"]``, noise."""
    nbytes = int(request.header["nbytes"])
    if request.header.get("random"):
        data = np.random.default_rng(context.attempt).integers(0, 256, nbytes, dtype=np.uint8)
    else:
        data = np.zeros(nbytes, dtype=np.uint8)
    return Message(header=_who(context, nbytes=nbytes), arrays={"data": data})


def scripted(*, context: FunctionContext, request: Message) -> Message:
    """Follow ``header["script"][attempt - 1]``: "ok", "error" (an injected fault), "raise" (the code's own
    exception: retried only per retry_exceptions), "lost" (a store key gone), "fatal" (not retryable), "crash"
    (SIGKILL itself) or "hang" (sleep past any test timeout). Attempts past the script succeed."""
    script = request.header.get("script", [])
    action = script[context.attempt - 1] if context.attempt <= len(script) else "ok"
    if action == "error":
        raise InjectedFault(f"scripted error on attempt {context.attempt}")
    if action == "raise":
        raise RuntimeError(f"scripted exception of the function's code on attempt {context.attempt}")
    if action == "lost":
        raise KeyNotFound(f"weights/main/{context.attempt}")   # as a store that lost (or evicted) the key
    if action == "fatal":
        raise EnvContractError(f"scripted fatal error on attempt {context.attempt}")
    if action == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "hang":
        time.sleep(3600)
    return Message(header=_who(context))
