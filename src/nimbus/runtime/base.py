"""The Runtime contract: invoke functions on warm workers; every attempt becomes a ledger record.

A *function* is a plain Python callable named by an entrypoint ``"package.module:callable"`` with the
signature ``fn(*, context: FunctionContext, request: Message) -> Message``. It runs in a worker
process that keeps ``context.cache`` between invocations of the same function (env instances,
models: that is what makes a warm start warm). Requests and results are codec ``Message``s; nothing
is pickled.

Header conventions: a request may carry ``"_affinity": key`` (route to the idle worker that last served
that key, so per-key warm state such as an actor rank's envs stays useful); an accepted result carries
``"_invocation_id"`` and ``"_attempt"``, by which consumers make ingestion idempotent (P2).

Example::

    spec = FunctionSpec(name="echo", entrypoint="nimbus.runtime.builtin:echo",
                        resources=Resources(cpus=1), timeout_s=5, max_retries=2)
    runtime = LocalRuntime(ledger=Ledger(), capacity_cpus=2)
    result = runtime.invoke(spec=spec, request=Message(header={"x": 1})).result()
    runtime.shutdown()
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nimbus.core import Runtime as Runtime  # the contract itself lives in core.py
from nimbus.data.codec import Message


@dataclass(frozen=True)
class Resources:
    """What one invocation occupies (and what the pricing model bills)."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory_mb: int = 1024


@dataclass(frozen=True)
class FunctionSpec:
    """A deployable function: its name (the warm-pool key), entrypoint, resources and limits."""

    name: str
    entrypoint: str
    resources: Resources = Resources()
    timeout_s: float = 60.0
    max_retries: int = 3
    retry_exceptions: int = 0   # of those retries, how many may follow an exception of the function's own code
    kind: str = "actor"  # actor | learner | parameter | probe | system: selects the pricing line
    workload: str = ""   # the workload it serves when several share one pool (ledger tag, fair share)
    heartbeat_s: float | None = None  # liveness (P5): killed and retried when silent 3x this; None: off


@dataclass
class FunctionContext:
    """What a running function sees besides its request. ``cache`` survives warm invocations."""

    worker_id: str
    function: str
    invocation_id: str
    attempt: int
    cache: dict[str, Any] = field(default_factory=dict)
    device: str | None = None  # the device leased for this invocation (runtime/devices.py), None without a pool


FunctionCallable = Callable[..., Message]


@dataclass(frozen=True)
class RuntimeStats:
    """Counters of one runtime. ``failures`` counts failed attempts; ``failed_invocations`` the futures
    that raised FunctionFailed."""

    workers_alive: int
    workers_idle: int
    workers_asleep: int
    busy_cpus: float
    queued: int
    cold_starts: int
    warm_starts: int
    retries: int
    failures: int
    timeouts: int
    failed_invocations: int
    dropped_results: int


def thread_timer(*, delay_s: float, callback: Callable[[], None]) -> threading.Timer:
    """A daemon ``threading.Timer`` running ``callback`` after ``delay_s`` real seconds (``cancel()`` stops it)."""
    timer = threading.Timer(delay_s, callback)
    timer.daemon = True
    timer.start()
    return timer


class DriverSide:
    """What every runtime offers the driver besides running functions, with real-time defaults: the clock a
    workflow times its rounds and polls its triggers with (``now_s``), the queue its done-callbacks feed and the
    loop waits on (``event_queue``), a timer (``call_later``, runtime/prewarm.py's trigger) and a block of the
    driver's own work during which no function runs in the driver's process (``exclusive``). The simulated runtime
    replaces the first three with its virtual clock (waiting on its queue advances it); the inline runtime replaces
    ``exclusive`` (its functions run on a thread of the driver's process, sharing torch's global RNG)."""

    def now_s(self) -> float:
        return time.perf_counter()

    def event_queue(self) -> queue.Queue:
        return queue.Queue()

    def call_later(self, *, delay_s: float, callback: Callable[[], None]) -> Any:
        """``callback`` after ``delay_s`` seconds; what it returns has ``cancel()``."""
        return thread_timer(delay_s=delay_s, callback=callback)

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def runtime_clock(*, runtime: Runtime | DriverSide) -> Callable[[], float]:
    """The clock a workflow times its rounds (and polls its triggers) with: real seconds, or a simulated runtime's."""
    return runtime.now_s


def event_queue(*, runtime: Runtime | DriverSide) -> queue.Queue:
    """The queue a workflow's done-callbacks feed and its loop waits on (a simulated runtime's advances its clock)."""
    return runtime.event_queue()


def between_calls(*, runtime: Runtime | DriverSide) -> contextlib.AbstractContextManager[None]:
    """A block of the driver's own work (an evaluation) during which no function runs in the driver's process
    (runtime.backend: inline, whose functions share torch's global RNG with the driver: an evaluation's
    ``torch.manual_seed`` would move a learner's draws, and a learner's draws the evaluation's)."""
    return runtime.exclusive()
