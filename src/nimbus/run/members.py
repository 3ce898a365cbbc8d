"""The one event loop: every run's workflows are driven here, a single run as a population of one (run/loop.py),
a population's members (``policies:``, ``pbt:``; the controller is pbt/population.py) and several workloads on one
pool (run/workloads.py). No workflow has a loop of its own.

Each member's events go to one queue, tagged (member index, generation); ``drive`` moves them: a member runs rounds
until its stop rule holds after one of them, or until nothing could send it an event (``exhausted``); an event of an
older generation (a replaced member's unfinished round) is dropped; a ``Gate`` may hold a member between rounds (its
triggers are not polled until the gate releases it: synchronous PBT). Every round goes through the same
``RoundHook`` as a single run's. The queue is the runtime's own (runtime/base.py ``event_queue``) and the members'
triggers are polled on its clock (``runtime_clock``): on the simulated backend, waiting on it advances the virtual
clock, so every member's functions run and end in one simulated-time order (docs/simulated.md, "Several workloads on
one pool").

Example::

    members = Members(configs=configs, runtime=runtime)
    for i, workflow in enumerate(workflows):
        members.add(workflow=workflow, hook=RoundHook(config=configs[i], workflow=members.get(i)), shared=shared)
    members.drive(on_failure=lambda i, error: False)     # False: the error stops the run
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from nimbus.config import NimbusConfig
from nimbus.core import Workflow
from nimbus.errors import FunctionFailed, StoreUnavailable
from nimbus.roles.remote import run_unless_store_lost, store_failure
from nimbus.run.book import RoundBook
from nimbus.run.signals import Interrupt
from nimbus.run.stop import stop_reason
from nimbus.runtime.base import event_queue, runtime_clock
from nimbus.types import RoundMetrics, Shared

log = logging.getLogger(__name__)


class Tagged:
    """A member's event queue: tags each event with (member index, generation) on the shared queue."""

    def __init__(self, *, shared: queue.Queue[Any], tag: tuple[int, int]) -> None:
        self.shared, self.tag = shared, tag

    def put(self, item: Any) -> None:
        self.shared.put((self.tag, item))


class Gate(Protocol):
    """Which members wait between rounds (synchronous PBT: pbt/population.py's Population)."""

    def holds(self, i: int) -> bool:
        """Member ``i`` ended a round and waits: its next round does not start yet."""
        ...

    def on_stopped(self, i: int) -> None:
        """Member ``i`` met its stop rule: nobody waits for it any more."""
        ...

    def take_released(self) -> list[int]:
        """The members that waited and may start their next round now (each once)."""
        ...


class Ungated:
    """No member ever waits: each starts its next round as soon as the last one ended."""

    def holds(self, i: int) -> bool:
        return False

    def on_stopped(self, i: int) -> None:
        pass

    def take_released(self) -> list[int]:
        return []


UNGATED = Ungated()


class Members:
    """The member workflows (core.Workflow) of one driver loop, their configs and their generations."""

    def __init__(self, *, configs: list[NimbusConfig], runtime: Any) -> None:
        """``runtime``: the pool every member invokes on; its event queue and clock drive the loop."""
        self.configs = configs
        self.workflows: list[Workflow] = []
        self.books: list[RoundBook] = []
        self.generation: list[int] = []
        self.events: queue.Queue[Any] = event_queue(runtime=runtime)
        self.clock = runtime_clock(runtime=runtime)   # the workflows' own clock: their TimeTriggers compare with it
        self.lost_store: StoreUnavailable | None = None

    def add(self, *, workflow: Workflow, hook: Callable[[RoundMetrics], None], shared: Shared) -> None:
        """Member ``workflow``, its round hook (run/rounds.py) and its book over ``shared``'s ledger (run/book.py)."""
        i = len(self.workflows)
        self.workflows.append(workflow)
        self.generation.append(0)
        self.books.append(RoundBook(config=self.configs[i], progress=workflow.progress, shared=shared, on_round=hook))
        self._attach(i=i, workflow=workflow)

    def get(self, i: int) -> Callable[[], Any]:
        """Member ``i``'s workflow as of now (a replaced member has a new one)."""
        return lambda: self.workflows[i]

    def _attach(self, *, i: int, workflow: Workflow) -> None:
        self.workflows[i] = workflow
        workflow.attach(events=Tagged(shared=self.events, tag=(i, self.generation[i])), book=self.books[i])

    def replace(self, i: int) -> Workflow:
        """A new workflow for member ``i`` over its System and progress, events of a new generation; started."""
        old = self.workflows[i]
        self.generation[i] += 1   # events of the failed round's other functions are ignored from now on
        new = old.renewed()
        self._attach(i=i, workflow=new)   # the same book: the member's bills and progress go on
        return new

    def stopped(self, i: int) -> str | None:
        return stop_reason(config=self.configs[i], progress=self.workflows[i].progress)

    def drive_until_stopped(self, *, on_failure: Callable[[int, FunctionFailed], bool],
                            on_replaced: Callable[[int, Any], None] = lambda i, workflow: None,
                            gate: Gate = UNGATED) -> list[str]:
        """``drive`` with SIGINT/SIGTERM → ``request_stop`` on every member and a lost store (P12) ending it cleanly
        (``self.lost_store``); each member's stop reason."""
        with Interrupt(workflows=self.workflows) as interrupt:   # the list itself: a replaced member's new workflow
            self.lost_store = run_unless_store_lost(run=lambda: self.drive(on_failure=on_failure,
                                                                            on_replaced=on_replaced, gate=gate))
        lost = "store_unavailable" if self.lost_store is not None else None
        return [lost or interrupt.received or self.stopped(i) or "interrupted" for i in range(len(self.workflows))]

    def raise_if_store_lost(self, *, where: Path) -> None:
        """After the final checkpoints: the run ends with StoreUnavailable when the store was lost."""
        if self.lost_store is not None:
            rounds = ", ".join(str(workflow.progress.rounds) for workflow in self.workflows)
            raise StoreUnavailable(f"{self.lost_store}; stopped cleanly after rounds {rounds} with a final "
                                   f"checkpoint of every member under {where}")

    def drive(self, *, on_failure: Callable[[int, FunctionFailed], bool],
              on_replaced: Callable[[int, Any], None] = lambda i, workflow: None, gate: Gate = UNGATED) -> None:
        """Every member runs rounds until its stop rule (checked whenever ``handle`` says a rule may now hold) or
        until it is ``exhausted``; ``on_failure(i, error)``: True when the member was re-seeded (it gets a new
        workflow, passed to ``on_replaced``), False to stop the run with the error. ``gate``: a member it holds
        starts its next round only once the gate releases it. With no event for ``poll_period_s`` (the shortest of
        the members'), every member that does not wait is polled: its clock triggers fire without events."""
        # a member resumed past its stop rule trains no further round: nobody waits for it
        active = {i for i in range(len(self.workflows)) if self.stopped(i) is None}
        waiting: set[int] = set()
        period_s = min(workflow.poll_period_s for workflow in self.workflows)
        for i in range(len(self.workflows)):
            if i in active:
                self.workflows[i].begin()
            else:
                gate.on_stopped(i)
        while active and not any(workflow.stop_requested for workflow in self.workflows):   # a signal stops all
            try:
                (i, gen), (kind, future, meta) = self.events.get(timeout=period_s)
            except queue.Empty:
                for j in sorted(active - waiting):
                    self._poll(j, active=active, gate=gate)
                continue
            if i not in active or gen != self.generation[i]:
                continue
            try:
                ended = self.workflows[i].handle(kind=kind, future=future, meta=meta)
            except FunctionFailed as exc:
                if store_failure(exc) is not None or not on_failure(i, exc):   # a lost store is no member's fault
                    raise
                on_replaced(i, self.replace(i))
                self.workflows[i].begin()
                continue
            if ended and self.stopped(i) is not None:
                active.discard(i)
                gate.on_stopped(i)
            elif gate.holds(i):
                waiting.add(i)
            else:
                self._poll(i, active=active, gate=gate)
            for j in gate.take_released():
                waiting.discard(j)
                if j in active:
                    self._poll(j, active=active, gate=gate)

    def _poll(self, i: int, *, active: set[int], gate: Gate) -> None:
        """Member ``i``'s triggers; a member with nothing left that could send an event stops here."""
        workflow = self.workflows[i]
        if workflow.stop_requested:   # a signal: no further function starts
            return
        workflow.poll(now_s=self.clock())
        if workflow.exhausted():
            log.info("%s: nothing left to run (its env-step budget is spent); it stops", self.configs[i].name)
            active.discard(i)
            gate.on_stopped(i)
