"""The core interfaces of nimbus: read this file first.

Each Protocol names what every implementation has and what callers use today; an implementation may
add more (a runtime's ``preregister``, a store's ``put_many``). Every method is keyword-only, like the code.
This module imports no nimbus module, not even for type checking, so every module may import it and it sits in no
import circle: the nimbus types its annotations name are strings, and ``TYPE_HOMES`` says where each one lives.
tests/unit/test_core.py checks every implementation against its protocol, method by method.

    Runtime     runs functions on warm workers         runtime/local.py, inline.py, ray_backend.py, factory.py
    Store       versioned immutable keyed objects      data/store.py (shm), stores.py, redis_store.py, ray_store.py
    Outbox      the sending side of a Channel          data/channel.py, ray_channel.py
    Inbox       the receiving side of a Channel        data/inbox.py, ray_channel.py
    Buffer      rows actors ingest and learners read   data/buffer.py
    Trigger     a condition that fires an action       data/triggers.py
    Controller  a per-round decision from metrics      nitro/baselines.py, scaler.py, scaler_authors.py
    Workflow    rounds of one technique, driven by the loop onpolicy/workflow.py (its streaming launch: pipelined.py),
                                                       lifecycle.py, offpolicy/workflow.py, stellaris/workflow.py,
                                                       marless/workflow.py (found by run/registry.py)
"""

# The nimbus types the annotations name are not imported (TYPE_HOMES says where each lives), so for the linters they
# are undefined names: ruff lets them be, mypy types them as Any here (each implementation keeps its own types).
# ruff: noqa: F821
# mypy: disable-error-code="name-defined"

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, runtime_checkable

if TYPE_CHECKING:
    from concurrent.futures import Future
    from pathlib import Path

    import numpy as np

TYPE_HOMES: dict[str, str] = {
    "CheckpointState": "nimbus.data.checkpoint", "Envelope": "nimbus.data.frames",
    "EvalResult": "nimbus.roles.evaluate", "FunctionSpec": "nimbus.runtime.base", "Message": "nimbus.data.codec",
    "MetricsSink": "nimbus.report.metrics", "NimbusConfig": "nimbus.config.root", "Progress": "nimbus.types",
    "RoundMetrics": "nimbus.types", "RuntimeStats": "nimbus.runtime.base", "ScalingDecision": "nimbus.types",
    "Shared": "nimbus.types",
}
"""The module of each nimbus type an annotation here names (tests/unit/test_core.py resolves every annotation
through it): the types sit in the layers above, which import these protocols."""

D = TypeVar("D", covariant=True)


@runtime_checkable
class Runtime(Protocol):
    """Runs functions (``fn(*, context, request) -> Message``) on warm workers; every attempt is a ledger record.

    Example::

        runtime = LocalRuntime(ledger=Ledger(), capacity_cpus=2)     # or InlineRuntime, RayRuntime
        spec = FunctionSpec(name="echo", entrypoint="nimbus.runtime.builtin:echo")
        result = runtime.invoke(spec=spec, request=Message(header={"x": 1})).result()
        runtime.prewarm(spec=spec, count=2)      # warm workers ahead of need (their cold starts are billed)
        runtime.now_s(); runtime.event_queue()   # the driver's clock and event queue (simulated: virtual time)
        with runtime.exclusive(): ...            # no function runs in the driver's process meanwhile (inline)
        runtime.shutdown()

    runtime/base.py ``DriverSide`` gives every runtime the real-time defaults of the driver-side four (``now_s``,
    ``event_queue``, ``call_later``, ``exclusive``); the simulated and inline runtimes replace some.
    """

    def invoke(self, *, spec: FunctionSpec, request: Message) -> Future[Message]: ...

    def map(self, *, spec: FunctionSpec, requests: list[Message]) -> list[Future[Message]]: ...

    def prewarm(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None: ...

    def bill_provisioned(self) -> None: ...

    def stats(self) -> RuntimeStats: ...

    def shutdown(self) -> None: ...

    def now_s(self) -> float: ...

    def event_queue(self) -> Any: ...

    def call_later(self, *, delay_s: float, callback: Callable[[], None]) -> Any: ...

    def exclusive(self) -> Any: ...


@runtime_checkable
class Store(Protocol):
    """Versioned immutable keyed objects (weights, optimizer state, shipped batches).

    Example::

        store.put(key="weights/main/3", message=Message(header={"policy_version": 3}, arrays=w))
        key = store.latest(prefix="weights/main")       # "weights/main/3"
        weights = store.get(key=key).arrays              # read-only arrays
        store.delete(key="weights/main/2")
        store.put(key="weights/main/4", message=m, writer=context.invocation_id)  # a retry may redo it
    """

    def put(self, *, key: str, message: Message, writer: str | None = None) -> None: ...

    def get(self, *, key: str) -> Message: ...

    def latest(self, *, prefix: str) -> str | None: ...

    def keys(self, *, prefix: str) -> list[str]: ...

    def delete(self, *, key: str) -> None:
        """Remove ``key``; an absent key is a no-op on every backend (a version forgotten twice, a retried cleanup)."""

    def close(self) -> None: ...


@runtime_checkable
class Outbox(Protocol):
    """The sending side of a Channel: messages go out in order, small ones batched (Outbox returns False
    when it dropped one; RayOutbox returns None).

    Example::

        outbox.send(message=Message(header={"env_steps": 256}, arrays=rows), tag={"rank": 0})
        outbox.flush(timeout_s=5.0)              # True when everything sent has left
        outbox.close()
    """

    def send(self, *, message: Message, tag: dict[str, Any]) -> bool | None: ...

    def flush(self, *, timeout_s: float | None = None) -> bool: ...

    def close(self, *, timeout_s: float = 5.0) -> None: ...


@runtime_checkable
class Inbox(Protocol):
    """The receiving side of a Channel: envelopes from every source, one queue.

    Example::

        envelope = inbox.get(timeout_s=1.0)      # raises queue.Empty on timeout
        rows, rank = envelope.message.arrays, envelope.tag["rank"]
        inbox.close()
    """

    def get(self, *, timeout_s: float | None = None) -> Envelope: ...

    def close(self) -> None: ...


@runtime_checkable
class Buffer(Protocol):
    """Rows that actors' results are ingested into (once per invocation id) and learners read by position.

    Example::

        accepted = buffer.ingest(invocation_id=header["_invocation_id"], actor_rank=0, policy_version=3,
                                 arrays={"obs": obs, "reward": reward})   # False: a duplicate, nothing changed
        positions = buffer.positions_since(seq=0)
        batch = buffer.read(indices=positions, keys=["obs"])
        buffer.mark_read(indices=positions)
        descriptor = buffer.descriptor()         # what a learner passes to Buffer.attach
    """

    def ingest(self, *, invocation_id: str, actor_rank: int, policy_version: int,
               arrays: dict[str, np.ndarray]) -> bool: ...

    def read(self, *, indices: np.ndarray, keys: list[str] | None = None) -> dict[str, np.ndarray]: ...

    def read_meta(self, *, indices: np.ndarray) -> dict[str, np.ndarray]: ...

    def mark_read(self, *, indices: np.ndarray) -> None: ...

    def positions_since(self, *, seq: int) -> np.ndarray: ...

    def descriptor(self) -> dict[str, Any]: ...

    def close(self, *, unlink: bool | None = None) -> None: ...

    @property
    def capacity_rows(self) -> int: ...

    @property
    def size_rows(self) -> int: ...

    @property
    def total_rows_ingested(self) -> int: ...


@runtime_checkable
class Trigger(Protocol):
    """A condition over the buffer, the store or the clock; a TriggerTable binds each to an action.

    Example::

        trigger = TimeTrigger(period_s=1.0)
        if trigger.check(now_s=time.monotonic()):   # True once per period; re-arms itself
            sync_weights()
        table.bind(name="invoke_learner", trigger=DataKeyTrigger(...), action=invoke_learner)
    """

    def check(self, *, now_s: float) -> bool: ...

    def reset(self) -> None: ...


@runtime_checkable
class Controller(Protocol[D]):
    """Decides once per round from the row just emitted. The seeds' baselines are controllers too.

    Example::

        scaler = FixedScaler(num_actors=4)
        decision = scaler.decide(metrics=row)     # ScalingDecision(num_actors=4, reason="fixed")
    """

    def decide(self, *, metrics: RoundMetrics) -> D: ...


@runtime_checkable
class ActorScaler(Controller["ScalingDecision"], Protocol):
    """A Controller that chooses the actor count; ``initial()`` is round 0's, before any metrics exist.

    Example::

        decision = scaler.initial()              # then scaler.decide(metrics=row) after every round
    """

    def initial(self) -> ScalingDecision: ...


@runtime_checkable
class Book(Protocol):
    """The round's books the run loop keeps for each workflow it drives (run/book.py RoundBook): the workflow's
    handlers report facts, the book keeps the bills, the non-finite guard, the scaler's decision and the row's close.

    Example::

        book.count_nonfinite(nonfinite=True)            # train.max_nonfinite_losses in a row stop the run
        book.add_episodes(returns=[21.0])               # the episodes that ended
        row = book.row(index=3, returns=[21.0], ...)    # the metrics row from the round's facts, its bill
        row, decision = book.decide(row=row, scaler=scaler, prewarmer=prewarmer, actors_before=4)
        book.close(row=row)                             # progress.last_row, then the loop's round hook
    """

    meter: Any

    def bill_round(self) -> float: ...

    def add_episodes(self, *, returns: list[float]) -> None: ...

    def row(self, *, index: int, returns: list[float], num_actors: int, num_learners: int, policy_version: int,
            now_s: float, sampling_s: float, transfer_s: float, learning_s: float, round_s: float,
            losses: dict[str, float], extras: dict[str, float]) -> RoundMetrics: ...

    def count_nonfinite(self, *, nonfinite: bool, what: str = ..., outcome: str = ...) -> None: ...

    def decide(self, *, row: RoundMetrics, scaler: Any, prewarmer: Any,
               actors_before: int) -> tuple[RoundMetrics, ScalingDecision]: ...

    def close(self, *, row: RoundMetrics) -> None: ...

    def cost_usd(self) -> float: ...


class _Unbooked:
    """The book of a workflow that no run loop drives yet: any use says so instead of failing obscurely."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the workflow's book ({name}) was used before the run loop attached one "
                           "(Workflow.attach, run/members.py)")


UNBOOKED = cast(Book, _Unbooked())


@runtime_checkable
class Workflow(Protocol):
    """Rounds of one technique. The run loop (run/loop.py builds and starts it; run/members.py's ``drive`` moves
    its events) decides when anything happens: every workflow is driven the same way, alone or beside others (a
    population's members, several workloads on one pool). Implemented by OnPolicyWorkflow (onpolicy/; ``pipelined`` is
    OnPolicyWorkflow with onpolicy/pipelined.py's streaming learner launch), OffPolicyWorkflow (offpolicy/),
    StellarisWorkflow (stellaris/) — the three over one System share policy/lifecycle.py's
    build/start/checkpoint/evaluate/close — and MarlessWorkflow (marless/). The loop finds the class by name
    (run/registry.py WORKFLOWS) and imports none.

    * ``build`` takes ``shared`` as a callable: a workflow checks its own input first (a buffer shared memory
      cannot hold, MARLess's agents) and exits 2 before any worker starts, then asks for the pool;
      ``resume_from`` is a path, since what is read from it differs (one checkpoint; one per MARLess policy).
      ``rank_base`` and ``workload`` serve a population's members and several workloads on one pool.
    * ``checkpoint()`` writes the checkpoint itself: MARLess writes one per policy and ``train.checkpoint_replay``
      a replay file beside it, so no single state object describes every workflow's; the loop decides when.
    * ``evaluate`` returns the evaluation (``.mean_return``...), which periodic evaluation also records.
    * ``metrics``: the sink the loop writes each round's row to (metrics.jsonl; the loop's trackers get it next).
    * Events: the workflow's functions put ``(kind, future, meta)`` on the queue ``attach`` gave it; the loop hands
      each back to ``handle`` (True: a stop rule may now hold, e.g. a round ended) and then calls ``poll`` (its
      triggers; also every ``poll_period_s`` without events). ``exhausted()``: nothing can send an event any more.
    * ``attach`` also hands over the loop's ``Book`` (run/book.py): the workflow reports each round's facts there
      (its cost, a non-finite update, the row), and the book keeps what every technique's round shares.

    Example (run/loop.py, run/members.py)::

        workflow = WORKFLOW.build(config=config, shared=pool, run_dir=run_dir, policy="main", resume_from=None)
        workflow.attach(events=tagged_queue, book=RoundBook(config=config, progress=workflow.progress,
                                                           shared=pool(), on_round=hook))
        workflow.start()                         # version 0 or the checkpoint's versions; prewarm
        workflow.begin()                         # the first round's functions start
        ended = workflow.handle(kind=kind, future=future, meta=meta)   # each event from the queue
        workflow.poll(now_s=clock())
        workflow.checkpoint()
        summary = {"return": workflow.evaluate(episodes=10, seed=1, explore=False).mean_return,
                   "cost_usd": book.cost_usd()}
        workflow.close()
    """

    progress: Progress
    poll_period_s: float
    stop_requested: bool

    @classmethod
    def build(cls, *, config: NimbusConfig, shared: Callable[[], Shared], run_dir: Path, policy: str,
              resume_from: Path | None, rank_base: int = 0, workload: str | None = None) -> Workflow: ...

    @property
    def metrics(self) -> MetricsSink: ...

    def start(self) -> None: ...

    def publish(self) -> None: ...

    def prewarm(self) -> None: ...

    def attach(self, *, events: Any, book: Book) -> None: ...

    def begin(self) -> None: ...

    def handle(self, *, kind: str, future: Any, meta: Any) -> bool: ...

    def poll(self, *, now_s: float) -> None: ...

    def exhausted(self) -> bool: ...

    def renewed(self) -> Workflow: ...

    def request_stop(self) -> None: ...

    def checkpoint(self) -> Any: ...

    def evaluate(self, *, episodes: int, seed: int, explore: bool) -> EvalResult: ...

    def close(self) -> None: ...
