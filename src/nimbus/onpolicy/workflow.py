"""The ``onpolicy`` workflow as ARTOS trigger → action bindings (ARTOS Table 3).

    ObjectKeyTrigger(weights/<policy>/*)      → invoke N actor functions with the new policy_version
    DataKeyTrigger(n=N actors, size=N·E·T)    → invoke the learner function on the FullBatch rows
    learner result (weights v+1 in the Store) → end of round: metrics, controllers, checkpoint

The workflow holds its parts: the actor half of the round (onpolicy/actor_round.py ``ActorRound``: the actors'
requests, their rows into the Buffer, the round's row) and the learner's launch, chosen from ``pipeline:``:
``FullBatch`` below, or ARTOS's pipelines (onpolicy/pipelined.py ``Streaming``: the learner starts on the first
actor's rows and streams the rest; the run registry names that variant ``pipelined``). The lifecycle (build, start,
checkpoint, evaluate, close) is policy/lifecycle.py's. The driver's event loop only moves events: a finished
actor's rollout is ingested into the Buffer (idempotent per invocation id), a finished learner's new version is
announced on StoreEvents, and the trigger table is polled. No algorithm-specific control code lives here.

With ``train.overlap`` the actors of round k+1 start when round k's learner starts, with the weights that learner
trains from (one version of lag, as IMPALA's and Sample Factory's actors): no core waits for the other stage. Round
k+1's learner starts when both its rows and round k's weights are in; PPO's ratio divides by the log-probability
each row's actor recorded, so the lagged rows are weighted by the policy that sampled them.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from nimbus.config import NimbusConfig
from nimbus.core import UNBOOKED, Book
from nimbus.data.triggers import ObjectKeyTrigger, TriggerTable
from nimbus.envs.obsnorm import moments_arrays
from nimbus.models.weights import optim_key, weights_key
from nimbus.onpolicy.actor_round import ActorRound, LearnerBatch, RoundState
from nimbus.onpolicy.pipelined import Streaming
from nimbus.policy.build import PolicyFunctions
from nimbus.policy.lifecycle import SystemWorkflow
from nimbus.policy.system import System
from nimbus.roles.learner import LearnerRequest, LearnerResult
from nimbus.roles.remote import finish_learner_round, ship_batch
from nimbus.runtime.base import event_queue, runtime_clock
from nimbus.types import Progress, ScalingDecision, schedule_fraction

log = logging.getLogger(__name__)
ACTOR_ENTRYPOINT = "nimbus.onpolicy.actor:actor_function"        # this workflow's actors, and Stellaris's
LEARNER_ENTRYPOINT = "nimbus.onpolicy.learner:learner_function"


class LearnerLaunch(Protocol):
    """When the round's learner starts and on which rows: ``FullBatch`` or ARTOS's ``Streaming``."""

    def trigger_actors(self, *, num_actors: int) -> int:
        """The actors whose rows fire the data trigger."""

    def actors_started(self, *, num_actors: int) -> None:
        """The round's actors were invoked."""

    def take(self, *, state: RoundState, version: int) -> LearnerBatch | None:
        """The rows the learner of ``version`` gets; None: its learner already runs."""

    def learner_done(self, *, state: RoundState) -> None:
        """The round's learner returned."""


class FullBatch:
    """The learner starts when every actor's rows are in (ARTOS Table 3, full batch), on the rows the replay strategy
    selects; on Ray they travel through the Store (roles/remote.py ``ship_batch``)."""

    def __init__(self, *, system: System, clock: Callable[[], float]) -> None:
        self.system, self.clock = system, clock

    def trigger_actors(self, *, num_actors: int) -> int:
        return num_actors

    def actors_started(self, *, num_actors: int) -> None:
        pass

    def take(self, *, state: RoundState, version: int) -> LearnerBatch:
        system = self.system
        indices = system.replay.select(buffer=system.buffer)
        assert indices is not None, "DataKeyTrigger fired but the replay strategy has no batch"
        system.replay.consumed(indices=indices)
        state.actors_done_s = state.actors_done_s or self.clock()
        shipped = ship_batch(system=system, policy=system.policy, version=version, indices=indices)  # ray: via Store
        return LearnerBatch(indices=indices, batch_key=shipped, obs_moments=moments_arrays(rms=state.obs_moments))

    def learner_done(self, *, state: RoundState) -> None:
        pass


def learner_launch(*, system: System, clock: Callable[[], float]) -> LearnerLaunch:
    """ARTOS's pipelines when ``pipeline.minibatch`` or ``pipeline.dual_stage`` is on, else the full batch."""
    pipeline = system.config.pipeline
    if pipeline.minibatch or pipeline.dual_stage:
        return Streaming(system=system, clock=clock)
    return FullBatch(system=system, clock=clock)


class OnPolicyWorkflow(SystemWorkflow):
    """Rounds as trigger → action bindings; the run loop (run/members.py) hands it each finished function's event
    (``handle``) and polls its triggers; each finished round's row goes to the loop's book (``attach``). Holds an
    ``ActorRound`` (``actors``) and a ``LearnerLaunch`` (``launch``); the rest of core.Workflow (build, start,
    checkpoint, evaluate, close) is policy/lifecycle.py's."""

    progress_type = Progress
    poll_period_s = 0.5   # no trigger of its own runs on the clock: a poll only follows an event

    @classmethod
    def functions(cls, *, config: NimbusConfig) -> PolicyFunctions:
        """onpolicy/actor.py's rollouts and onpolicy/learner.py's update, whatever the config."""
        return PolicyFunctions(actor_entrypoint=ACTOR_ENTRYPOINT, learner_entrypoint=LEARNER_ENTRYPOINT)

    def __init__(self, *, system: System, progress: Progress) -> None:
        self.system = system
        self.progress = progress
        self.book: Book = UNBOOKED   # the run loop's (attach)
        self.policy = system.policy
        self.adopt_version: Callable[[int], int] = lambda version: version  # PBT's exploit may publish another
        self.events: queue.Queue[tuple[str, Future, Any]] = event_queue(runtime=system.runtime)
        self.clock = runtime_clock(runtime=system.runtime)   # rounds and triggers; simulated seconds when simulated
        self.actors = ActorRound(system=system, progress=progress, clock=self.clock, watch=self._watch)
        self.launch = learner_launch(system=system, clock=self.clock)
        self.learning_round: RoundState | None = None  # train.overlap: the round whose learner runs now
        self.learner_due = False                       # train.overlap: rows ready, waiting for the running learner
        self.stop_requested = False
        self.table = TriggerTable()
        versions = ObjectKeyTrigger(store_events=system.store_events, key_prefix=f"weights/{self.policy}/")
        self.table.bind(name="invoke_actors", trigger=versions, action=self._invoke_actors)
        self.table.bind(name="invoke_learner", trigger=self.actors.data_trigger, action=self._invoke_learner)

    @property
    def round(self) -> RoundState:
        """The round whose actors sample now (or last sampled)."""
        return self.actors.sampling

    # ----------------------------------------------------------------------------------- actions
    def _invoke_actors(self) -> None:
        overlapped = self.learning_round is not None
        sampling = self.actors.round
        if self.system.config.train.overlap and sampling is not None and sampling is not self.learning_round \
                and sampling.actors_done_s is None:
            return   # a new version was announced while the next round already samples (started by the learner)
        num_actors = self.decision.num_actors
        self.actors.start(index=self.progress.rounds + overlapped, policy_version=self.progress.policy_version,
                          trigger_actors=self.launch.trigger_actors(num_actors=num_actors))
        self.launch.actors_started(num_actors=num_actors)

    def _invoke_learner(self) -> None:
        cfg, version = self.system.config, self.progress.policy_version
        if self.learning_round is not None:   # train.overlap: the rows wait for the running learner's weights
            self.learner_due = True
            self.round.actors_done_s = self.clock()
            return
        batch = self.launch.take(state=self.round, version=version)
        if batch is None:
            return   # ARTOS pipelines: the trigger fires again as later actors land; the learner streams them
        progress = schedule_fraction(progress=self.progress, total_env_steps=cfg.train.total_env_steps)
        request = LearnerRequest(env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs),
                                 env_imports=list(cfg.env.imports), env_wrappers=list(cfg.env.wrappers),
                                 algo=cfg.algo.model_dump(mode="json"), policy=self.policy, policy_version=version,
                                 has_optimizer_state=version > 0, buffer=self.system.buffer.descriptor(),
                                 progress=progress, seed=cfg.seed, device=cfg.learner.device,
                                 compile=cfg.learner.compile, torch_threads=cfg.learner.torch_threads,
                                 probe=self.system.probe.to_header() if self.system.probe else None,
                                 batch_key=batch.batch_key)
        message = request.to_message(indices=batch.indices, obs_moments=batch.obs_moments)
        message.header.update(batch.header)
        future = self.system.runtime.invoke(spec=self.system.learner_spec, request=message)
        self._watch(kind="learner", future=future, meta=version)
        if cfg.train.overlap:   # the next round samples with this version while the learner makes the next one
            self.learning_round = self.round
            self._invoke_actors()

    def _watch(self, *, kind: str, future: Future, meta: Any) -> None:
        future.add_done_callback(lambda f: self.events.put((kind, f, meta)))

    # ------------------------------------------------------------------------------------ events
    def _on_learner(self, *, future: Future, version: int) -> None:
        self.launch.learner_done(state=self.round)
        result = future.result()
        self.actors.prewarmer.round_finished()
        learned = LearnerResult.from_message(result)
        new_version = learned.policy_version
        self.book.count_nonfinite(nonfinite=learned.nonfinite)
        finish_learner_round(system=self.system, policy=self.policy, version=version, new_version=new_version)
        self.progress.policy_version = new_version  # before on_round: a checkpoint there holds this round's version
        state, self.learning_round = self.learning_round or self.round, None
        self.actors.finish(state=state, learned=learned, book=self.book)
        self.switch_version(version=self.adopt_version(new_version))  # a controller may replace it (PBT exploit)
        if self.learner_due:   # train.overlap: the next round's rows arrived while this learner ran
            self.learner_due = False
            self._invoke_learner()

    def switch_version(self, *, version: int) -> None:
        """Make ``version`` the current one and announce it: the next round's actors start at the next ``poll``.
        Between rounds a controller may call it with a version of its own (synchronous PBT's exploit of a member
        that waited for the population)."""
        self._forget_old_versions(current=version)
        self.progress.policy_version = version
        self.system.store_events.notify(key=weights_key(policy=self.policy, version=version))

    def _forget_old_versions(self, *, current: int) -> None:
        keep = self.system.config.store.keep_versions
        stale = current - keep
        if stale >= 0:
            for key in (weights_key(policy=self.policy, version=stale), optim_key(policy=self.policy, version=stale)):
                self.system.store.delete(key=key)

    # ------------------------------------------- the run loop's contract (run/members.py drives every workflow)
    def begin(self) -> None:
        """Announce the current version, so the first round's actors start."""
        self.system.store_events.notify(key=weights_key(policy=self.policy, version=self.progress.policy_version))
        self.table.poll(now_s=self.clock())

    def exhausted(self) -> bool:
        """Never: a round always follows the last (the run stops by its stop rules)."""
        return False

    @property
    def decision(self) -> ScalingDecision:
        """The scaler's decision the next round's actors follow (the run's summary reads its actors)."""
        return self.actors.decision

    def poll(self, *, now_s: float) -> None:
        self.table.poll(now_s=now_s)

    def handle(self, *, kind: str, future: Future, meta: Any) -> bool:
        """Move one finished function's event into the round; True when it ended the round (a learner)."""
        if kind == "actor":
            self.actors.ingest(future=future, rank=meta)
            return False
        self._on_learner(future=future, version=meta)
        return True
