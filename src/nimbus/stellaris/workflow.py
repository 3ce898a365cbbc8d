"""The ``stellaris`` workflow (Stellaris §IV, Fig. 4) as trigger → action bindings over parts it holds.

    an actor delivers                       → its rows, post-processed once (PPO: GAE), fill the round's
                                              buffer; each full slice goes to the Store
                                              (``batch/<policy>/r<k>/s<i>``) with one task per pass
                                              (stellaris/filling.py, slices.py)
    DataKeyTrigger(n=N actors, size=N·E·T) → the rest is the round's last slice; the next round's actors
                                              start at once with the newest weights
    a learner slot is free                  → invoke a learner function on the next task (its slice only)
      (and the rule's may_launch)             at the newest version (stellaris/learner.py); at most
                                              ``stellaris.learners`` in flight
    a gradient lands                        → the aggregation rule (stellaris/rules.py) queues, refuses
                                              (P7, counted) or aggregates: the parameter function
                                              (stellaris/parameter.py) steps and publishes v+1
    every task of a batch is settled        → the round's metrics row (staleness, threshold, admitted,
                                              refused, aggregations, truncated fraction, learners)

One parameter function runs at a time; gradients that land meanwhile are offered when it returns. A learner
slot stays taken until the rule has taken its gradient (back-pressure: else a backlog, and staleness, grow without
bound), except with ``stellaris.gather_arrivals`` under a rule that decides over its queue: the slot frees when its
gradient lands and the landed gradients are offered together (``rule.offer_many``). Passes of a slice never share
a version (stellaris/filling.py). Versions no reader needs are deleted after each aggregation. A round is one batch;
its row is written when every gradient computed on it is applied or refused. The next round's actors start once every
task of the earlier batches is launched. No rule waits forever: ``rule.lost``, ``rule.applied(refused_keys=)``,
``rule.unpublished`` and a watchdog (``rule.stalled()``); the rule's state travels in the checkpoint. A learner reads
the newest *published* version, never waits for one being produced; its staleness counts from it.
Details: docs/stellaris.md. Round metrics: stellaris/round_stats.py.

Parts it holds: the actor half of the round (onpolicy/actor_round.py ``ActorRound``: requests, rows into the Buffer,
the round's row), the filling buffer (stellaris/filling.py ``SliceFilling``), the parameter function's calls and the
versions they publish (stellaris/parameter_calls.py ``ParameterCalls``) and what a checkpoint adds
(stellaris/persistence.py ``StellarisCheckpoint``); the lifecycle is policy/lifecycle.py's ``SystemWorkflow``.
"""

from __future__ import annotations

import itertools
import logging
import queue
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from nimbus.config import NimbusConfig
from nimbus.config.rules import OFF_POLICY
from nimbus.core import UNBOOKED, Book
from nimbus.data.triggers import TriggerTable
from nimbus.models.weights import weights_key
from nimbus.onpolicy.actor_round import ActorRound, RoundLearning, RoundState
from nimbus.onpolicy.workflow import ACTOR_ENTRYPOINT
from nimbus.policy.build import PolicyFunctions
from nimbus.policy.lifecycle import SystemWorkflow
from nimbus.policy.system import System
from nimbus.runtime.base import event_queue, runtime_clock
from nimbus.stellaris.filling import SliceFilling
from nimbus.stellaris.flights import InFlight, gradient_request
from nimbus.stellaris.learner import GradientResult
from nimbus.stellaris.parameter import ParameterRequest, ParameterResult
from nimbus.stellaris.parameter_calls import ParameterCalls, delete_keys
from nimbus.stellaris.persistence import StellarisCheckpoint
from nimbus.stellaris.round_stats import Batch, FlightMeter, mean_stats, round_extras
from nimbus.stellaris.rules import Aggregation, Rejection, Verdict, make_rule
from nimbus.stellaris.slices import Slice
from nimbus.types import Progress, ScalingDecision, schedule_fraction

log = logging.getLogger(__name__)
GRADIENT_LEARNER_ENTRYPOINT = "nimbus.stellaris.learner:gradient_learner_function"
TRANSITIONS_ACTOR_ENTRYPOINT = "nimbus.offpolicy.actor:offpolicy_actor_function"   # IMPACT: rows (s, a, r, s')


class StellarisWorkflow(SystemWorkflow):
    """Stellaris: several learner functions in flight, a parameter function aggregates by a rule. Holds an
    ``ActorRound`` (``actors``), a ``SliceFilling`` (``slices``), ``ParameterCalls`` (``parameter``) and a
    ``StellarisCheckpoint`` (``persistence``)."""

    progress_type = Progress
    poll_period_s = 0.5   # no trigger of its own runs on the clock: a poll only follows an event

    @classmethod
    def functions(cls, *, config: NimbusConfig) -> PolicyFunctions:
        """Gradient learners (stellaris/learner.py); actors that write transitions for an off-policy algorithm."""
        actor = TRANSITIONS_ACTOR_ENTRYPOINT if config.algo.name in OFF_POLICY else ACTOR_ENTRYPOINT
        return PolicyFunctions(actor_entrypoint=actor, learner_entrypoint=GRADIENT_LEARNER_ENTRYPOINT,
                               learner_role="gradient_learner")

    def __init__(self, *, system: System, progress: Progress) -> None:
        self.system, self.progress = system, progress
        self.book: Book = UNBOOKED   # the run loop's (attach)
        self.policy = system.policy
        self.events: queue.Queue[tuple[str, Future, Any]] = event_queue(runtime=system.runtime)
        self.clock = runtime_clock(runtime=system.runtime)   # rounds and triggers; simulated seconds when simulated
        self.actors = ActorRound(system=system, progress=progress, clock=self.clock, watch=self._watch)
        self.stop_requested = False
        cfg = system.config.stellaris
        self.cfg = cfg
        self.rule = make_rule(name=cfg.rule, learners=cfg.learners, decay=cfg.decay, root=cfg.root,
                              softsync_k=cfg.softsync_k, ssp_bound=cfg.ssp_bound, max_queue=cfg.max_queue)
        self.rule.version = progress.policy_version
        self.gradient_spec = system.learner_spec
        self.parameter = ParameterCalls(system=system, progress=progress)
        self.table = TriggerTable()   # no ObjectKeyTrigger: actors start when a batch is taken, not per version
        self.table.bind(name="take_batch", trigger=self.actors.data_trigger, action=self._take_batch)
        self.batches: list[Batch] = []
        self.meter = FlightMeter(now_s=self.clock())   # learners in flight over time (round_stats.py)
        self.slices = SliceFilling(system=system, batch_rows=self.actors.rows(self.decision.num_actors),
                                   batches=self.batches, meter=self.meter, clock=self.clock)
        self.in_flight: dict[int, InFlight] = {}
        self.arrivals: list[tuple[InFlight, GradientResult]] = []   # landed while a parameter function ran
        self.parameter_busy = False
        self.batch_ready = False                  # the next batch arrived while this one is still learned
        self.owner: dict[str, Batch] = {}         # gradient key → the batch it was computed on
        self.held: dict[str, InFlight] = {}        # offered to the rule, not yet applied or refused
        self.task_ids = itertools.count()
        self.next_round = progress.rounds
        self.watchdog_fired = 0
        # a slot frees when its gradient lands and the landed gradients are offered together (rules that gather)
        self.gathering = cfg.gather_arrivals and self.rule.gathers
        self.persistence = StellarisCheckpoint(rule=self.rule, resident=self.parameter.resident, store=system.store,
                                               invoke=lambda message: self.parameter.invoke(message=message))

    @property
    def round(self) -> RoundState:
        """The round whose actors sample now (or last sampled)."""
        return self.actors.sampling

    # ------------------------------------------------------------------------------- actions
    def _take_batch(self) -> None:
        """Every actor of the sampling round delivered: its remainder is its last slice, and the next round's actors
        start (once every task of the earlier batches is launched: they may not run further ahead)."""
        if any(b.tasks for b in self.batches if b is not self.slices.filling):
            self.batch_ready = True
            return
        self.actors.prewarmer.round_finished()   # the actors are needed again now (runtime/prewarm.py)
        self.round.actors_done_s = self.clock()
        batch = self._filling_batch()
        rest = self.slices.cutter.rest()
        if rest is not None:
            self._add_slice(batch=batch, arrays=rest)
        self.slices.complete(batch=batch)
        self._invoke_actors()     # the next round samples with the newest weights while this one is learned
        self._launch_learners()

    def _invoke_actors(self) -> None:
        """The next round's actors sample with the newest weights (rounds overlap: it starts before this one's row)."""
        self.actors.start(index=self.next_round, policy_version=self.progress.policy_version)
        self.next_round += 1

    def _watch(self, *, kind: str, future: Future, meta: Any) -> None:
        future.add_done_callback(lambda f: self.events.put((kind, f, meta)))

    def _on_rows(self) -> None:
        """An actor delivered: its rows, post-processed once (PPO: GAE), go to the round's filling buffer; every
        full slice is put in the Store and its learners may start at once (stellaris/filling.py, slices.py)."""
        rows = self.slices.arrived_rows()
        if rows is None:   # a duplicate delivery (the buffer dropped it)
            return
        batch = self._filling_batch()
        for arrays in self.slices.cut(rows=rows, batch=batch, round_index=self.round.index):
            self._add_slice(batch=batch, arrays=arrays)
        self._launch_learners()

    def _filling_batch(self) -> Batch:
        return self.slices.filling_batch(state=self.round, in_flight=len(self.in_flight))

    def _add_slice(self, *, batch: Batch, arrays: dict[str, np.ndarray]) -> None:
        self.slices.add(batch=batch, arrays=arrays)

    def _start_learning(self, *, batch: Batch) -> None:
        """Its first learner launches: the rule's training round k starts (β_k, stellaris/rules.py) and the round's
        learning time counts from here. Batches start in order: a batch's tasks launch only once the earlier
        batches' are all launched, so round k starts as it did before slices, when its learning starts."""
        now_s = self.clock()
        self.rule.start_round(index=batch.round.index)
        batch.threshold = self.rule.threshold
        batch.learning_started_s, batch.flight_integral_start = now_s, self.meter.integral(now_s=now_s)

    def _launch_learners(self) -> None:
        if self.batch_ready and not any(b.tasks for b in self.batches if b is not self.slices.filling):
            self.batch_ready = False      # every task of the earlier batches launched: the next round starts
            self._take_batch()
            return
        for batch in [b for b in self.batches if b.tasks]:
            for slot in range(self.cfg.learners):
                if slot in self.in_flight or not self.rule.may_launch(slot=slot):
                    continue
                index = self.slices.next_task(batch=batch, version=self.progress.policy_version)
                if index is None:
                    break
                self._launch(slot=slot, batch=batch, piece=batch.tasks.pop(index)[2])

    def _launch(self, *, slot: int, batch: Batch, piece: Slice) -> None:
        if batch.learners_invoked == 0:
            self._start_learning(batch=batch)
        cfg, version = self.system.config, self.progress.policy_version
        grad_key = f"grad/{self.policy}/{next(self.task_ids)}"
        progress = schedule_fraction(progress=self.progress, total_env_steps=cfg.train.total_env_steps)
        # no truncation peers: the learners aggregated together are not known yet; alone, Eq. 2
        # is min(r_self, ρ), and the parameter function recomputes a member aggregated with other versions
        request = gradient_request(
            config=cfg, policy=self.policy, version=version, batch_key=piece.key, grad_key=grad_key, peer_versions=(),
            truncation=cfg.stellaris.truncation_form(), rho=cfg.stellaris.rho, progress=progress,
            slowdown=cfg.stellaris.slowdown(slot=slot))
        flight = InFlight(slot=slot, batch=batch, read_version=version, grad_key=grad_key, data_key=piece.key,
                          positions=piece.positions, progress=progress)
        self.slices.record_read(piece=piece, version=version)
        self.in_flight[slot] = flight
        self._flight_changed()
        self.owner[grad_key] = batch
        self.rule.launched(slot=slot)
        batch.learners_invoked += 1
        batch.learners_early += not batch.complete
        future = self.system.runtime.invoke(spec=self.gradient_spec,
                                            request=request.to_task_message(positions=piece.positions))
        self._watch(kind="gradient", future=future, meta=flight)

    def _aggregate(self, *, aggregation: Aggregation, batch: Batch) -> None:
        """The rule aggregated: one parameter function call applies it (stellaris/parameter_calls.py)."""
        request, message = self.parameter.request(aggregation=aggregation, progress=self.progress,
                                                  flights=[self.held[m.key] for m in aggregation.members])
        batch.recomputed += sum(r is not None for r in request.recompute)
        self.parameter_busy = True
        future = self.parameter.invoke(message=message)
        self._watch(kind="parameter", future=future, meta=(aggregation, batch, request))

    # -------------------------------------------------------------------------------- events
    def _on_actor(self, *, future: Future, rank: int) -> None:
        self.actors.ingest(future=future, rank=rank)

    def handle(self, *, kind: str, future: Future, meta: Any) -> bool:
        if kind == "actor":
            self._on_actor(future=future, rank=meta)
            self._on_rows()
            return False
        if kind == "gradient":
            self._on_gradient(future=future, flight=meta)
        else:
            self._on_parameter(future=future, aggregation=meta[0], batch=meta[1], request=meta[2])
        ended = self._finish_settled_batches()
        self._offer_waiting()
        self._launch_learners()
        self._watchdog()
        return self._finish_settled_batches() or ended

    def _on_gradient(self, *, future: Future, flight: InFlight) -> None:
        done = GradientResult.from_message(future.result())   # raises FunctionFailed when retries are spent
        flight.batch.stats.append(done.stats)
        flight.batch.compute_s += done.compute_s
        if done.nonfinite:
            self._count_nonfinite(nonfinite=True)
            del self.in_flight[flight.slot]
            self._flight_changed()
            self.owner.pop(flight.grad_key)
            flight.batch.lost()
            self.rule.lost(arrival=flight.arrival(), reason="non-finite loss or gradient")   # sync may relaunch
            return
        if self.gathering:   # the learner is done: its slot computes again while its gradient waits to be offered
            del self.in_flight[flight.slot]
            self._flight_changed()
        self.arrivals.append((flight, done))

    def _offer_waiting(self) -> None:
        if self.gathering:
            if self.arrivals and not self.parameter_busy:
                flights, self.arrivals = [flight for flight, _ in self.arrivals], []
                self.held.update((flight.grad_key, flight) for flight in flights)
                self._settle(verdict=self.rule.offer_many(arrivals=[f.arrival() for f in flights]))
            return
        while self.arrivals and not self.parameter_busy:
            flight, _ = self.arrivals.pop(0)
            del self.in_flight[flight.slot]   # the slot holds its gradient until the rule has taken it (back-pressure)
            self._flight_changed()
            self.held[flight.grad_key] = flight
            self._settle(verdict=self.rule.offer(arrival=flight.arrival()))

    def _settle(self, *, verdict: Verdict) -> None:
        self._refuse(rejections=verdict.rejected)
        if verdict.aggregation is not None:
            self._aggregate(aggregation=verdict.aggregation, batch=self.owner[verdict.aggregation.members[-1].key])

    def _watchdog(self) -> None:
        """No rule waits forever: when no learner is in flight, no gradient waits to be offered,
        no parameter function runs and a batch still has tasks that no free slot may launch, nothing can change
        the rule's mind; it settles what it holds and re-opens launches (rule_base.Rule.stalled)."""
        if self.in_flight or self.arrivals or self.parameter_busy or not any(b.tasks for b in self.batches):
            return
        log.warning("stellaris: rule %s allows no launch with nothing in flight (holding %d): watchdog",
                    self.rule.name, self.rule.holding)
        self.watchdog_fired += 1
        self._settle(verdict=self.rule.stalled())
        self._launch_learners()
        if not (self.in_flight or self.parameter_busy) and self.batch_ready:
            # only repeated passes are left, and no actor samples (the next round waits for them): no newer version
            # can come, so they are dropped
            self.slices.drop_repeated_passes(version=self.progress.policy_version)
            self._launch_learners()

    def _refuse(self, *, rejections: tuple[Rejection, ...]) -> None:
        for rejection in rejections:
            self.held.pop(rejection.key, None)
            self.owner.pop(rejection.key).refused_by_rule(staleness=rejection.staleness)
            delete_keys(store=self.system.store, keys=[rejection.key])
            log.debug("gradient %s refused: %s", rejection.key, rejection.reason)

    def _on_parameter(self, *, future: Future, aggregation: Aggregation, batch: Batch,
                      request: ParameterRequest) -> None:
        done = ParameterResult.from_message(future.result())
        self.parameter_busy = False
        refused_keys = {r["key"] for r in done.refused}
        for member in aggregation.members:
            self.held.pop(member.key, None)
            self.owner.pop(member.key).aggregated_member(staleness=member.staleness, size=len(aggregation.members),
                                                         refused=member.key in refused_keys)
        batch.aggregations += 1
        batch.parameter_s += done.parameter_s
        if done.rebuilt and request.replay:   # (a cold first call with nothing to replay is not logged)
            log.info("stellaris: the parameter function rebuilt its state at version %d (%d aggregations replayed)",
                     request.policy_version, len(request.replay))
        self.parameter.returned(request=request, done=done)
        self._count_nonfinite(nonfinite=bool(refused_keys))
        if done.published:
            self.rule.applied(aggregation=aggregation, refused_keys=refused_keys)
            self.progress.policy_version = done.policy_version
            self.parameter.published(version=done.policy_version, needed=self._read_versions())
        else:   # every member refused: the version stays, and sync may launch for it again
            self.rule.unpublished(aggregation=aggregation)

    def _count_nonfinite(self, *, nonfinite: bool) -> None:
        self.book.count_nonfinite(nonfinite=nonfinite, what="gradients",
                                  outcome="were non-finite or refused by the parameter function")

    # ------------------------------------------------------------------------------ rounds
    def _finish_settled_batches(self) -> bool:
        ended = False
        while self.batches and self.batches[0].complete and self.batches[0].outstanding == 0 \
                and not self.batches[0].tasks:
            batch = self.batches.pop(0)
            delete_keys(store=self.system.store, keys=batch.slice_keys)
            self.slices.forget(keys=batch.slice_keys)
            self._finish_batch(batch=batch)
            ended = True
        return ended

    def _finish_batch(self, *, batch: Batch) -> None:
        stats = mean_stats(stats=batch.stats)
        learned = RoundLearning(policy_version=self.progress.policy_version, stats=stats,
                                learning_s=self.clock() - batch.learning_started_s, compute_s=batch.compute_s)
        extras = {**round_extras(batch=batch, now_s=self.clock(), meter=self.meter, learners=self.cfg.learners),
                  "staleness/watchdog": float(self.watchdog_fired)}   # times the watchdog acted so far (run total)
        self.actors.finish(state=batch.round, learned=learned, book=self.book, extras=extras,
                           num_learners=self.cfg.learners)

    def _flight_changed(self) -> None:
        self.meter.change(in_flight=len(self.in_flight), now_s=self.clock(), open_batches=self.batches)

    def _read_versions(self) -> set[int]:
        """The versions still read: by learners in flight, held or waiting gradients and the sampling round's actors
        (a retry re-reads its weights); retention keeps them (stellaris/parameter_calls.py)."""
        needed = {f.read_version for f in (*self.in_flight.values(), *self.held.values(),
                                           *(flight for flight, _ in self.arrivals))}
        needed.add(self.round.policy_version)
        return needed

    # -------------------------------------------------------------------------------- the run loop's contract
    def begin(self) -> None:
        """The first round's actors start at once (no trigger waits for a version: see ``_take_batch``); the
        current version is announced and the triggers polled."""
        self._invoke_actors()
        self.system.store_events.notify(key=weights_key(policy=self.policy, version=self.progress.policy_version))
        self.table.poll(now_s=self.clock())

    def poll(self, *, now_s: float) -> None:
        self.table.poll(now_s=now_s)

    @property
    def decision(self) -> ScalingDecision:
        """The scaler's decision the next round's actors follow."""
        return self.actors.decision

    def exhausted(self) -> bool:
        """Never: the next round's actors start when a batch is taken (the run stops by its stop rules)."""
        return False

    def checkpoint_extra(self) -> dict:
        return self.persistence.extra()

    def checkpoint(self) -> Path:
        """A resident parameter function's optimizer state exported first (stellaris/persistence.py), then the
        checkpoint every workflow over one System saves."""
        version = self.progress.policy_version
        gone = self.persistence.export(version=version, model=self.parameter.model_fields(version=version),
                                       parameter_busy=self.parameter_busy)
        delete_keys(store=self.system.store, keys=gone)
        return super().checkpoint()

    def publish(self) -> None:
        """The checkpoint's version (policy/lifecycle.py), and the rule's state saved with it."""
        super().publish()
        self.persistence.restore(resumed=self.resumed)
