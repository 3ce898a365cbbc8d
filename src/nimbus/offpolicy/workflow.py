"""The ``offpolicy`` workflow (DQN, SAC, IMPALA) as ARTOS trigger → action bindings (Table 3).

    actor result                               → ingest (idempotent per invocation id), re-invoke that
                                                 actor at once with the newest version it was sent
    DataKeyTrigger(n=1, size=train_rows)       → learner due: sample a ReplayBatch, invoke the learner
      or TimeTrigger(learner_period_s)           (one learner in flight; the rest waits for it)
    TimeTrigger(weight_sync_period_s)          → sync_to=all: actors take the newest policy_version
    ObjectKeyTrigger(weights/<policy>/*)       → sync_to=heard_from: the new version goes to the actors
                                                 whose fragments the update consumed (XingTian IMPALA)

A "round" is one learner update: each learner result emits one metrics row, with the batch's policy
lag (learner version − the versions that collected its rows). ``max_steps_ahead`` adds Reverb-style
back-pressure and ``lockstep`` turns the same bindings into the sync-style alternating loop (RLlib,
CleanRL) for comparison; both are off by default. Decisions: docs/offpolicy.md.
"""

from __future__ import annotations

import json
import logging
import queue
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nimbus.config import NimbusConfig
from nimbus.core import UNBOOKED, Book
from nimbus.data.codec import Message
from nimbus.data.fragment_replay import FIFO, Circular
from nimbus.data.replay import ReplayBatch, SampledReplay
from nimbus.data.result import invocation_id
from nimbus.data.triggers import DataKeyTrigger, ObjectKeyTrigger, TimeTrigger, TriggerTable
from nimbus.models.weights import optim_key, weights_key
from nimbus.nitro.probe import round_probe_extras
from nimbus.offpolicy.actor import OffPolicyActorRequest
from nimbus.offpolicy.heard_from import HeardFromVersions
from nimbus.offpolicy.learner import OffPolicyLearnerRequest
from nimbus.offpolicy.plan import Pacer, make_replay, plan_for
from nimbus.policy.build import BufferPlan, PolicyFunctions
from nimbus.policy.lifecycle import SystemWorkflow
from nimbus.policy.replay_checkpoint import restore_replay
from nimbus.policy.system import System
from nimbus.roles.actor import ActorResult
from nimbus.roles.learner import LearnerResult
from nimbus.runtime.base import event_queue, runtime_clock
from nimbus.runtime.prewarm import make_prewarmer
from nimbus.types import Progress, schedule_fraction

log = logging.getLogger(__name__)
POLL_S = 0.02
OFFPOLICY_ACTOR_ENTRYPOINT = "nimbus.offpolicy.actor:offpolicy_actor_function"
OFFPOLICY_LEARNER_ENTRYPOINT = "nimbus.offpolicy.learner:offpolicy_learner_function"


@dataclass
class LearnerCall:
    future: Future
    batch: ReplayBatch
    version: int
    gradient_steps: int
    heard_from: tuple[int, ...]
    lags: np.ndarray
    started_s: float


@dataclass
class Window:
    """What happened since the last round row."""

    started_s: float
    episode_returns: list[float] = field(default_factory=list)
    sampling_s: float = 0.0
    ingest_s: float = 0.0
    actor_work_s: float = 0.0
    parked_s: float = 0.0
    ranks_ran: set[int] = field(default_factory=set)   # ranks running at the start or started since


class OffPolicyWorkflow(SystemWorkflow):
    """Actors and one learner as trigger → action bindings; the run loop (run/members.py) hands it each finished
    function's event and polls its triggers (the stop rules are checked after every event). ``on_round`` gets each
    row. The rest of core.Workflow (build, start, checkpoint, evaluate, close) is policy/lifecycle.py's."""

    progress_type = Progress
    poll_period_s = POLL_S   # TimeTriggers (learner_period_s, weight_sync_period_s) fire on polls, events or not

    @classmethod
    def functions(cls, *, config: NimbusConfig) -> PolicyFunctions:
        """Actors that write transitions, learners that sample a replay (offpolicy/actor.py, offpolicy/learner.py)."""
        return PolicyFunctions(actor_entrypoint=OFFPOLICY_ACTOR_ENTRYPOINT,
                               learner_entrypoint=OFFPOLICY_LEARNER_ENTRYPOINT)

    @classmethod
    def buffer_plan(cls, *, config: NimbusConfig, guard_rows: int) -> BufferPlan:
        """Uniform / Prioritized / NStep / FIFO / Circular per the algorithm's config, sized by offpolicy/plan.py."""
        plan = plan_for(config=config)
        return BufferPlan(capacity_rows=plan.capacity_rows,
                          replay=make_replay(plan=plan, seed=config.seed, guard_rows=guard_rows))

    def __init__(self, *, system: System, progress: Progress) -> None:
        cfg = system.config
        self.system, self.progress = system, progress
        self.policy = system.policy   # its Store keys: a population member's or a workload's own name, else "main"
        self.book: Book = UNBOOKED   # the run loop's (attach)
        self.wf = cfg.offpolicy
        self.plan = plan_for(config=cfg)
        if not isinstance(system.replay, SampledReplay):   # buffer_plan's make_replay: each one samples
            raise TypeError(f"the offpolicy workflow samples its replay, got {type(system.replay).__name__}")
        self.replay: SampledReplay = system.replay
        self.decision = system.scaler.initial()
        self.pacer = Pacer(plan=self.plan, max_steps_ahead=self.wf.max_steps_ahead,
                           max_steps_per_call=self.wf.max_gradient_steps_per_call,
                           base_actors=self.decision.num_actors,
                           prioritized_steps_per_call=self.wf.prioritized_steps_per_call)
        if progress.restore_replay is not None:    # train.checkpoint_replay: no refill from learning_starts
            restore_replay(message=progress.restore_replay, buffer=system.buffer, replay=self.replay, pacer=self.pacer)
        self.events: queue.Queue[tuple[str, Future, Any]] = event_queue(runtime=system.runtime)
        self.clock = runtime_clock(runtime=system.runtime)   # rounds and triggers; simulated seconds when simulated
        self.stop_requested = False
        self.running: dict[int, tuple[Future, int]] = {}     # actor rank → (future, policy_version)
        self.idle_since: dict[int, float] = {}               # actor ranks held back, since when
        self.slot_seq: dict[int, int] = {}
        self.start_version = progress.policy_version          # 0, or the checkpoint's version when resumed
        self.synced_version = progress.policy_version        # sync_to=all
        self.actor_version = HeardFromVersions()              # sync_to=heard_from
        self.published: set[int] = {progress.policy_version}
        self.learner: LearnerCall | None = None
        self.learner_due = False
        self.last_heard_from: tuple[int, ...] = ()
        self.last_result_s: float | None = None
        self.lag_counts: Counter[int] = Counter()
        self.window = Window(started_s=self.clock())
        self.table = self._bind()
        self.prewarmer = make_prewarmer(config=cfg, runtime=system.runtime, ledger=system.ledger,
                                        actor_spec=system.actor_spec, workload=cfg.name)   # prewarm.mode

    def _bind(self) -> TriggerTable:
        table, wf = TriggerTable(), self.wf
        if wf.learner_trigger == "data":
            trigger: Any = DataKeyTrigger(buffer=self.system.buffer, n_actors=1, size_rows=self.plan.train_rows)
        else:
            trigger = TimeTrigger(period_s=wf.learner_period_s, clock=self.clock)
        table.bind(name="learner_due", trigger=trigger, action=self._learner_is_due)
        if wf.sync_to == "all":
            sync = TimeTrigger(period_s=wf.weight_sync_period_s, clock=self.clock)
            table.bind(name="sync_weights", trigger=sync, action=self._sync_all)
        else:
            table.bind(name="send_weights", trigger=ObjectKeyTrigger(store_events=self.system.store_events,
                                                                     key_prefix=f"weights/{self.policy}/"),
                       action=self._send_to_heard_from)
        return table

    # ----------------------------------------------------------------------------------- actions
    def _learner_is_due(self) -> None:
        self.learner_due = True

    def _sync_all(self) -> None:
        self.synced_version = self.progress.policy_version

    def _send_to_heard_from(self) -> None:
        self.actor_version.heard(ranks=self.last_heard_from, newest=self.progress.policy_version)

    def _version_for(self, rank: int) -> int:
        """sync_to=heard_from: a rank the learner has not heard from (new, or boosted again) gets the newest."""
        if self.wf.sync_to == "all":
            return self.synced_version
        return self.actor_version.version_for(rank=rank, newest=self.progress.policy_version)

    def _may_start_actor(self) -> bool:
        cfg = self.system.config
        if self.pacer.rows_ingested + self.pacer.rows_in_flight >= cfg.train.total_env_steps:
            return False  # the run's env-step budget is spent (collected or in flight)
        if self.wf.lockstep:
            return self.learner is None and not self.learner_due
        if self.pacer.may_collect(rows=self.plan.fragment_rows, actors=self.decision.num_actors):
            return True
        return not self.running and self.learner is None  # never deadlock: nothing else would move

    def _invoke_actor(self, rank: int) -> None:
        cfg, version = self.system.config, self._version_for(rank)
        warmup = self.plan.random_warmup and \
            self.pacer.rows_ingested + self.pacer.rows_in_flight < self.plan.learning_starts
        request = OffPolicyActorRequest(
            env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs), env_imports=list(cfg.env.imports),
            env_wrappers=list(cfg.env.wrappers), num_envs=cfg.env.num_envs_per_actor,
            fragment_steps=cfg.actors.fragment_steps, seed=cfg.seed, actor_rank=rank,
            slot_seq=self.slot_seq.get(rank, self.progress.slot_seq_base), policy_version=version,
            weights_key=weights_key(policy=self.policy, version=version), algo=cfg.algo.model_dump(mode="json"),
            random_actions=warmup)
        future = self.system.runtime.invoke(spec=self.system.actor_spec, request=request.to_message())
        self.running[rank] = (future, version)
        self.window.ranks_ran.add(rank)
        self.pacer.rows_in_flight += self.plan.fragment_rows
        if rank in self.idle_since:
            self.window.parked_s += self.clock() - self.idle_since.pop(rank)
        future.add_done_callback(lambda f: self.events.put(("actor", f, rank)))

    def _learner_batch(self) -> tuple[ReplayBatch | None, int]:
        buffer = self.system.buffer
        if self.plan.kind == "fifo":
            return self.replay.sample(buffer=buffer), 1
        steps = self.pacer.owed_steps() if self.wf.learner_trigger == "data" else \
            min(self.plan.fixed_gradient_steps, self.pacer.max_steps_per_call if self.plan.prioritized else 1 << 30)
        if steps < 1 or buffer.size_rows < self.plan.learning_starts:
            return None, 0
        return self.replay.sample(buffer=buffer, rows=steps * self.plan.batch_size), steps

    def _start_learner(self) -> None:
        if self.learner is not None or not self.learner_due or (self.wf.lockstep and self.running):
            return
        batch, steps = self._learner_batch()
        if batch is None:
            self.learner_due = False
            return
        self.replay.consumed(indices=batch.indices)
        cfg, version, buffer = self.system.config, self.progress.policy_version, self.system.buffer
        meta = buffer.read_meta(indices=batch.indices)
        request = OffPolicyLearnerRequest(
            env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs), env_imports=list(cfg.env.imports),
            env_wrappers=list(cfg.env.wrappers), algo=cfg.algo.model_dump(mode="json"),
            policy=self.policy, policy_version=version, has_optimizer_state=version > 0, buffer=buffer.descriptor(),
            progress=schedule_fraction(progress=self.progress, total_env_steps=cfg.train.total_env_steps),
            seed=cfg.seed, device=cfg.learner.device, torch_threads=cfg.learner.torch_threads,
            return_td_errors=self.plan.prioritized, row_group=self.plan.row_group,
            probe=self.system.probe.to_header() if self.system.probe else None)  # Nitro (nitro/probe.py)
        future = self.system.runtime.invoke(spec=self.system.learner_spec,
                                            request=request.to_batch_message(batch=batch))
        self.learner = LearnerCall(future=future, batch=batch, version=version, gradient_steps=steps,
                                   heard_from=tuple(sorted({int(r) for r in meta["actor_rank"]})),
                                   lags=version - meta["policy_version"], started_s=self.clock())
        self.pacer.steps_started += steps
        # the rows a "fifo" plan's replay (FIFO, Circular) took; IMPACT's reuses count once
        self.pacer.rows_taken = self.replay.taken_rows if isinstance(self.replay, (FIFO, Circular)) else 0
        self.learner_due = self.wf.learner_trigger == "data" and self._more_work()
        future.add_done_callback(lambda f: self.events.put(("learner", f, None)))

    def _more_work(self) -> bool:
        """Data that fired the trigger while the learner was busy is still owed a call."""
        if isinstance(self.replay, (FIFO, Circular)):   # the "fifo" plan's replay
            return self.replay.pending_fragments(buffer=self.system.buffer) >= self.plan.fragments_per_batch
        return self.pacer.owed_steps() >= 1

    def _pump(self) -> None:
        """Start the learner and every actor that may run now."""
        learner_before = self.learner
        self._start_learner()
        now = self.clock()   # the longest-parked rank first: rank 0 must not take every free slot
        waiting = sorted((r for r in range(self.decision.num_actors) if r not in self.running),
                         key=lambda r: (self.idle_since.get(r, now), r))
        for rank in waiting:
            if not self._may_start_actor():
                self.idle_since.setdefault(rank, self.clock())
                continue
            self.prewarmer.await_warm()   # workers pre-warmed (a scale-up's) take these invocations
            self._invoke_actor(rank)
        if self.learner is not None and self.learner is not learner_before:
            now = self.clock()      # a learner call is a round: the parked ranks wait for its end
            parked = [r for r in range(self.decision.num_actors) if r not in self.running]
            self.prewarmer.round_started(num_actors=len(parked),
                                         idle_s=[now - self.idle_since.get(r, now) for r in parked])

    # ------------------------------------------------------------------------------------ events
    def _on_actor(self, *, future: Future, rank: int) -> None:
        self.running.pop(rank, None)
        self.pacer.rows_in_flight -= self.plan.fragment_rows
        result: Message = future.result()  # raises FunctionFailed when retries are spent
        started, done = self.clock(), ActorResult.from_message(result)
        accepted = self.system.buffer.ingest(invocation_id=invocation_id(result) or f"{rank}-{self.slot_seq.get(rank)}",
                                             actor_rank=rank, policy_version=done.policy_version,
                                             arrays=result.arrays)
        if accepted:
            self.slot_seq[rank] = self.slot_seq.get(rank, self.progress.slot_seq_base) + 1
            self.pacer.rows_ingested += self.plan.fragment_rows
            progress, window = self.progress, self.window
            progress.env_steps += done.env_steps
            self.book.add_episodes(returns=done.episode_returns)
            window.episode_returns.extend(done.episode_returns)
            window.sampling_s += done.sampling_s
            window.actor_work_s += done.env_s + done.inference_s
        self.window.ingest_s += self.clock() - started

    def _on_learner(self, *, future: Future) -> None:
        call, self.learner = self.learner, None
        if call is None:
            raise RuntimeError("a learner result arrived with no learner call in flight")
        result: Message = future.result()
        self.prewarmer.round_finished()
        learned = LearnerResult.from_message(result)
        self.book.count_nonfinite(nonfinite=learned.nonfinite)
        if "td_errors" in result.arrays:
            kept = result.arrays["kept"]
            batch = ReplayBatch(indices=call.batch.indices[kept], seqs=call.batch.seqs[kept])
            self.replay.update_priorities(buffer=self.system.buffer, batch=batch, td_errors=result.arrays["td_errors"])
        new_version = learned.policy_version
        self.progress.policy_version = new_version
        self.published.add(new_version)
        self.last_heard_from = call.heard_from
        self.lag_counts.update(int(lag) for lag in call.lags)
        self.system.store_events.notify(key=weights_key(policy=self.policy, version=new_version))
        self._finish_round(call=call, learned=learned)
        self._forget_old_versions()

    def _finish_round(self, *, call: LearnerCall, learned: LearnerResult) -> None:
        now, progress, window = self.clock(), self.progress, self.window
        round_s = now - (self.last_result_s if self.last_result_s is not None else call.started_s)
        self.last_result_s = now
        extras = {
            "recent_return_mean": float(np.mean(progress.recent_returns)) if progress.recent_returns else float("nan"),
            "policy_lag_mean": float(np.mean(call.lags)), "policy_lag_max": float(np.max(call.lags)),
            "gradient_steps": float(call.gradient_steps), "learner_call_s": now - call.started_s,
            "compute_s": learned.compute_s, "stale_rows": float(learned.stale_rows),
            "actor_work_s": window.actor_work_s, "actor_parked_s": window.parked_s,
            "buffer_rows": float(self.system.buffer.size_rows), "actors_running": float(len(self.running)),
            "actors_heard_from": float(len(call.heard_from)), "actors_decided": float(self.decision.num_actors),
            **self.prewarmer.extras(),
            **round_probe_extras(extras=learned.extras, round_s=round_s)}
        row = self.book.row(
            index=progress.rounds, returns=window.episode_returns,
            num_actors=len(window.ranks_ran),   # the actors that ran this window, not the decision
            num_learners=1, policy_version=learned.policy_version, now_s=now,
            sampling_s=window.sampling_s, transfer_s=window.ingest_s + learned.transfer_s,
            learning_s=learned.learning_s, round_s=round_s, losses=learned.stats, extras=extras)
        progress.rounds += 1
        self.window = Window(started_s=now, ranks_ran=set(self.running))
        before = self.decision.num_actors   # Nitro reads this update's probe; boosted ranks start warm
        row, self.decision = self.book.decide(row=row, scaler=self.system.scaler, prewarmer=self.prewarmer,
                                              actors_before=before)
        boosted = range(before, self.decision.num_actors)       # boosted ranks start from the newest version
        self.actor_version.forget(ranks=[rank for rank in boosted if rank not in self.running])
        self.book.close(row=row)

    def _forget_old_versions(self) -> None:
        """Delete versions no actor may still load: older than the newest ``keep_versions`` and unreferenced."""
        newest, keep = self.progress.policy_version, self.system.config.store.keep_versions
        referenced = {self.synced_version, *self.actor_version.held(), *(v for _, v in self.running.values())}
        for version in sorted(self.published):
            if version > newest - keep:
                break
            keys = [optim_key(policy=self.policy, version=version)]
            if version not in referenced:
                keys.append(weights_key(policy=self.policy, version=version))
                self.published.discard(version)
            for key in keys:
                self.system.store.delete(key=key)

    def policy_lag_histogram(self) -> dict[int, int]:
        """Rows consumed per policy lag (learner version − the version that collected the row)."""
        return dict(sorted(self.lag_counts.items()))

    # -------------------------------------------------------------------------------------- loop
    def replay_parts(self) -> dict:
        """``train.checkpoint_replay``: the buffer's rows, the replay strategy's state and the pacer's counters."""
        return dict(buffer=self.system.buffer, replay=self.system.replay, pacer=self.pacer)

    # ------- the run loop's contract (run/members.py drives every workflow; attach, renewed: policy/lifecycle.py)
    def begin(self) -> None:
        """Announce the current version, then start the learner and every actor that may run."""
        self.system.store_events.notify(key=weights_key(policy=self.policy, version=self.progress.policy_version))
        self.poll(now_s=self.clock())

    def handle(self, *, kind: str, future: Future, meta: Any) -> bool:
        """Move one finished function's event in; True: every event may meet a stop rule (an actor's env steps)."""
        if kind == "actor":
            self._on_actor(future=future, rank=meta)
        else:
            self._on_learner(future=future)
        return True

    def poll(self, *, now_s: float) -> None:
        """The triggers (the learner's and the weight sync's clocks among them), then whatever may start now."""
        self.table.poll(now_s=now_s)
        self._pump()

    def exhausted(self) -> bool:
        """The env-step budget is spent (collected or in flight) and nothing is left to learn: no event will come."""
        return not self.running and self.learner is None and not self._can_progress()

    def close(self) -> None:
        """The pre-warmer, the policy-lag histogram (policy_lag.json), then the System."""
        self.prewarmer.close()
        lost = self.replay.lost_fragments if isinstance(self.replay, (FIFO, Circular)) else 0
        (self.system.run_dir / "policy_lag.json").write_text(
            json.dumps({"policy_lag_rows": self.policy_lag_histogram(), "lost_fragments": lost}))
        super().close()

    def _can_progress(self) -> bool:
        return self._may_start_actor() or self.learner_due or self._more_work()
