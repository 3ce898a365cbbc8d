"""The ``sync`` on-policy workflow as ARTOS trigger → action bindings (ARTOS Table 3).

    ObjectKeyTrigger(weights/<policy>/*)      → invoke N actor functions with the new policy_version
    DataKeyTrigger(n=N actors, size=N·E·T)    → invoke the learner function on the FullBatch rows
    learner result (weights v+1 in the Store) → end of round: metrics, controllers, checkpoint

The driver's event loop only moves events: a finished actor's rollout is ingested into the Buffer
(idempotent per invocation id), a finished learner's new version is announced on StoreEvents, and
the trigger table is polled. No algorithm-specific control code lives here.

With ``train.overlap`` the actors of round k+1 start when round k's learner starts, with the weights that learner
trains from (one version of lag, as IMPALA's and Sample Factory's actors): no core waits for the other stage. Round
k+1's learner starts when both its rows and round k's weights are in; PPO's ratio divides by the log-probability
each row's actor recorded, so the lagged rows are weighted by the policy that sampled them.
"""

from __future__ import annotations

import logging
import queue
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from nimbus.data.codec import Message
from nimbus.data.triggers import DataKeyTrigger, ObjectKeyTrigger, TriggerTable
from nimbus.envs.batched import resolve_backend
from nimbus.envs.obsnorm import merge, moments_arrays, pop_moments
from nimbus.envs.slot_state import SlotState, pop_slot_state
from nimbus.models.weights import optim_key, weights_key
from nimbus.nitro.probe import round_probe_extras
from nimbus.onpolicy.lifecycle import SystemWorkflow
from nimbus.onpolicy.system import System
from nimbus.roles.actor import ActorRequest
from nimbus.roles.learner import LearnerRequest
from nimbus.roles.remote import finish_learner_round, ship_batch
from nimbus.runtime.base import event_queue, runtime_clock
from nimbus.runtime.prewarm import PrewarmController, make_prewarmer
from nimbus.core import UNBOOKED, Book
from nimbus.types import Progress, RoundMetrics, ScalingDecision, schedule_fraction

log = logging.getLogger(__name__)


@dataclass
class RoundState:
    """What the driver accumulates during one round."""

    index: int
    policy_version: int
    decision: ScalingDecision
    started_s: float
    actors_done_s: float | None = None
    episode_returns: list[float] = field(default_factory=list)
    env_steps: int = 0
    sampling_s: float = 0.0
    ingest_s: float = 0.0
    work_s: float = 0.0  # slowest actor's env stepping + policy inference: the round's critical path
    obs_moments: Any = None  # merged raw-observation moments of the accepted fragments (algo.normalize_obs)


def _prewarmer(*, system: System) -> PrewarmController:
    """``prewarm.mode: monitor``: pre-warm actor workers during the learner's update and ahead of a scale-up
    (runtime/prewarm.py)."""
    return make_prewarmer(config=system.config, runtime=system.runtime, ledger=system.ledger,
                          actor_spec=system.actor_spec, workload=system.config.name)


def _overhead(*, round_s: float, actor_work_s: float, compute_s: float) -> dict[str, float]:
    """Framework overhead: the round minus env stepping + inference (slowest actor) and gradient compute."""
    overhead_s = max(0.0, round_s - actor_work_s - compute_s)
    return {"overhead_s": overhead_s, "overhead_share": overhead_s / max(round_s, 1e-9),
            "actor_work_s": actor_work_s, "compute_s": compute_s}


class SyncWorkflow(SystemWorkflow):
    """Rounds as trigger → action bindings; the run loop (run/members.py) hands it each finished function's event
    (``handle``) and polls its triggers; each finished round's row goes to the loop's book (``attach``). The rest of core.Workflow
    (build, start, checkpoint, evaluate, close) is onpolicy/lifecycle.py's."""

    progress_type = Progress
    poll_period_s = 0.5   # no trigger of its own runs on the clock: a poll only follows an event

    def __init__(self, *, system: System, progress: Progress) -> None:
        self.system = system
        self.progress = progress
        self.book: Book = UNBOOKED   # the run loop's (attach)
        self.policy = system.policy
        self.rank_base = system.rank_base  # population members' actor ranks are disjoint (env slots, affinity, seeds)
        self.adopt_version: Callable[[int], int] = lambda version: version  # PBT's exploit may publish another
        self.events: queue.Queue[tuple[str, Future, Any]] = event_queue(runtime=system.runtime)
        self.clock = runtime_clock(runtime=system.runtime)   # rounds and triggers; simulated seconds when simulated
        self.started_s = self.clock()
        self.decision = system.scaler.initial()
        self.round: RoundState | None = None          # the round whose actors sample now (or last sampled)
        self.learning_round: RoundState | None = None  # train.overlap: the round whose learner runs now
        self.learner_due = False                       # train.overlap: rows ready, waiting for the running learner
        self.slot_seq: dict[int, int] = dict(progress.slot_seq)
        self.slot_states: dict[int, SlotState] = dict(progress.slot_states)
        self.restore_slots: dict[int, SlotState] = dict(progress.restore_slots)
        self.stop_requested = False
        self.table = TriggerTable()
        self.data_trigger = DataKeyTrigger(buffer=system.buffer, n_actors=self.decision.num_actors,
                                           size_rows=self._rows(self.decision.num_actors))
        self.table.bind(name="invoke_actors",
                        trigger=ObjectKeyTrigger(store_events=system.store_events, key_prefix=f"weights/{self.policy}/"),
                        action=self._invoke_actors)
        self.table.bind(name="invoke_learner", trigger=self.data_trigger, action=self._invoke_learner)
        self.prewarmer = _prewarmer(system=system)  # ARTOS workload monitor (prewarm.mode; no-op for none)
        cfg = system.config
        self.env_backend = resolve_backend(backend=cfg.actors.env_backend, env_id=cfg.env.id, kwargs=cfg.env.kwargs,
                                           custom=bool(cfg.env.imports or cfg.env.wrappers),
                                           snapshots=cfg.train.exact_resume or cfg.actors.restore_slots)

    # ----------------------------------------------------------------------------------- actions
    def _rows(self, num_actors: int) -> int:
        cfg = self.system.config
        return num_actors * cfg.env.num_envs_per_actor * cfg.actors.fragment_steps

    def _invoke_actors(self) -> None:
        cfg, version = self.system.config, self.progress.policy_version
        overlapped = self.learning_round is not None
        if cfg.train.overlap and self.round is not None and self.round is not self.learning_round and \
                self.round.actors_done_s is None:
            return   # a new version was announced while the next round already samples (started by the learner)
        self.round = RoundState(index=self.progress.rounds + overlapped, policy_version=version,
                                decision=self.decision, started_s=self.clock())
        self.prewarmer.await_warm()   # workers pre-warmed for this round (a scale-up's): ready before invoking
        self.prewarmer.round_started(num_actors=self.decision.num_actors)
        self.data_trigger.n_actors = self.decision.num_actors
        self.data_trigger.size_rows = self._rows(self.decision.num_actors)
        self.data_trigger.reset()
        for rank in range(self.decision.num_actors):
            request = ActorRequest(env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs),
                                   env_imports=list(cfg.env.imports), env_wrappers=list(cfg.env.wrappers),
                                   num_envs=cfg.env.num_envs_per_actor, fragment_steps=cfg.actors.fragment_steps,
                                   seed=cfg.seed, actor_rank=self.rank_base + rank,
                                   slot_seq=self.slot_seq.get(rank, self.progress.slot_seq_base),
                                   policy_version=version, weights_key=weights_key(policy=self.policy, version=version),
                                   algo=cfg.algo.model_dump(mode="json"), env_backend=self.env_backend,
                                   snapshot=cfg.train.exact_resume or cfg.actors.restore_slots)
            message = request.to_message(restore=self._slot_to_restore(rank))
            future = self.system.runtime.invoke(spec=self.system.actor_spec, request=message)
            self._watch(kind="actor", future=future, meta=rank)

    def _slot_to_restore(self, rank: int) -> "SlotState | None":
        """A resumed run's saved slot (first request only); with ``actors.restore_slots`` the rank's newest slot on
        every request, which the actor uses only when its worker lacks the slot (reclaimed, new, or a retry)."""
        restore = self.restore_slots.pop(rank, None)
        if restore is None and self.system.config.actors.restore_slots:
            restore = self.slot_states.get(rank)
        return restore

    def _invoke_learner(self) -> None:
        cfg, version = self.system.config, self.progress.policy_version
        if self.learning_round is not None:   # train.overlap: the rows wait for the running learner's weights
            self.learner_due = True
            self.round.actors_done_s = self.clock()
            return
        indices = self.system.replay.select(buffer=self.system.buffer)
        assert indices is not None, "DataKeyTrigger fired but the replay strategy has no batch"
        self.system.replay.consumed(indices=indices)
        self.round.actors_done_s = self.round.actors_done_s or self.clock()
        progress = schedule_fraction(progress=self.progress, total_env_steps=cfg.train.total_env_steps)
        shipped = ship_batch(system=self.system, policy=self.policy, version=version, indices=indices)  # ray: via Store
        request = LearnerRequest(env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs),
                                 env_imports=list(cfg.env.imports), env_wrappers=list(cfg.env.wrappers),
                                 algo=cfg.algo.model_dump(mode="json"), policy=self.policy, policy_version=version,
                                 has_optimizer_state=version > 0, buffer=self.system.buffer.descriptor(),
                                 progress=progress, seed=cfg.seed, device=cfg.learner.device,
                                 compile=cfg.learner.compile,
                                 torch_threads=cfg.learner.torch_threads,
                                 probe=self.system.probe.to_header() if self.system.probe else None,
                                 batch_key=shipped)
        future = self.system.runtime.invoke(spec=self.system.learner_spec, request=request.to_message(indices=indices, obs_moments=moments_arrays(rms=self.round.obs_moments)))
        self._watch(kind="learner", future=future, meta=version)
        if cfg.train.overlap:   # the next round samples with this version while the learner makes the next one
            self.learning_round = self.round
            self._invoke_actors()

    def _watch(self, *, kind: str, future: Future, meta: Any) -> None:
        future.add_done_callback(lambda f: self.events.put((kind, f, meta)))

    # ------------------------------------------------------------------------------------ events
    def _on_actor(self, *, future: Future, rank: int) -> None:
        result: Message = future.result()  # raises FunctionFailed when retries are spent
        self.prewarmer.actor_finished()
        started = self.clock()
        header = result.header
        moments = pop_moments(arrays=result.arrays)  # not a buffer column
        slot_state = pop_slot_state(header=header, arrays=result.arrays)  # nor is the env slot (exact resume)
        accepted = self.system.buffer.ingest(invocation_id=header.get("_invocation_id", f"{self.round.index}-{rank}"),
                                             actor_rank=rank, policy_version=header["policy_version"],
                                             arrays=result.arrays)
        if accepted:
            self.slot_seq[rank] = self.slot_seq.get(rank, self.progress.slot_seq_base) + 1
            if slot_state is not None:
                self.slot_states[rank] = slot_state
            self.round.obs_moments = merge(into=self.round.obs_moments, other=moments)
            self.round.episode_returns.extend(header["episode_returns"])
            self.round.env_steps += header["env_steps"]
            self.round.sampling_s = max(self.round.sampling_s, header["sampling_s"])
            self.round.work_s = max(self.round.work_s, header["env_s"] + header["inference_s"])
        self.round.ingest_s += self.clock() - started

    def _on_learner(self, *, future: Future, version: int) -> None:
        result: Message = future.result()
        self.prewarmer.round_finished()
        header = result.header
        new_version = header["policy_version"]
        self.book.count_nonfinite(nonfinite=header["nonfinite"])
        finish_learner_round(system=self.system, policy=self.policy, version=version, new_version=new_version)
        self.progress.policy_version = new_version  # before on_round: a checkpoint there holds this round's version
        self._finish_round(header=header)
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

    def _finish_round(self, *, header: dict[str, Any], extras: dict[str, float] | None = None,
                      num_learners: int = 1) -> None:
        now = self.clock()
        state, progress = self.learning_round or self.round, self.progress
        self.learning_round = None
        progress.rounds += 1
        progress.slot_seq, progress.slot_states = dict(self.slot_seq), dict(self.slot_states)  # what a checkpoint saves
        progress.env_steps += state.env_steps
        progress.episodes += len(state.episode_returns)
        window = self.system.config.train.return_window
        progress.recent_returns = (progress.recent_returns + state.episode_returns)[-window:]
        returns = state.episode_returns
        cost_usd = self.book.bill_round()
        row = RoundMetrics(
            round=state.index, env_steps=progress.env_steps, episodes=progress.episodes,
            return_mean=float(np.mean(returns)) if returns else None,
            return_min=float(np.min(returns)) if returns else None,
            return_max=float(np.max(returns)) if returns else None,
            num_actors=state.decision.num_actors, num_learners=num_learners, policy_version=header["policy_version"],
            sampling_s=state.sampling_s, transfer_s=state.ingest_s + header["transfer_s"],
            learning_s=header["learning_s"], round_s=now - state.started_s,
            wall_s=now - self.started_s + progress.wall_s_before,
            cost_usd=cost_usd, losses=header["stats"],
            extras={"recent_return_mean": float(np.mean(progress.recent_returns)) if progress.recent_returns
                    else float("nan"), **_overhead(round_s=now - state.started_s, actor_work_s=state.work_s,
                                                   compute_s=header["compute_s"]),
                    **round_probe_extras(extras=header.get("extras", {}), round_s=now - state.started_s),
                    **self.prewarmer.extras(), **(extras or {})})
        # the actors now running or last run (async_learners: the next round's); Nitro reads this round's probe
        row, self.decision = self.book.decide(row=row, scaler=self.system.scaler, prewarmer=self.prewarmer,
                                              actors_before=self.decision.num_actors)
        self.book.close(row=row)

    def _forget_old_versions(self, *, current: int) -> None:
        keep = self.system.config.store.keep_versions
        stale = current - keep
        if stale >= 0:
            for key in (weights_key(policy=self.policy, version=stale), optim_key(policy=self.policy, version=stale)):
                try:
                    self.system.store.delete(key=key)
                except KeyError:
                    pass

    # ------------------------------------------- the run loop's contract (run/members.py drives every workflow)
    def attach(self, *, events: Any, book: Book) -> None:
        """Put this workflow's events on ``events`` (anything with ``put``: the driver's tagged queue) and its
        rounds' facts in ``book`` (run/book.py)."""
        self.events, self.book = events, book

    def begin(self) -> None:
        """Announce the current version, so the first round's actors start."""
        self.system.store_events.notify(key=weights_key(policy=self.policy, version=self.progress.policy_version))
        self.table.poll(now_s=self.clock())

    def renewed(self) -> "SyncWorkflow":
        """A new workflow over this one's System and progress (a population member re-seeded after a failure)."""
        return type(self)(system=self.system, progress=self.progress)

    def exhausted(self) -> bool:
        """Never: a round always follows the last (the run stops by its stop rules)."""
        return False

    def poll(self, *, now_s: float) -> None:
        self.table.poll(now_s=now_s)

    def handle(self, *, kind: str, future: Future, meta: Any) -> bool:
        """Move one finished function's event into the round; True when it ended the round (a learner)."""
        if kind == "actor":
            self._on_actor(future=future, rank=meta)
            return False
        self._on_learner(future=future, version=meta)
        return True
