"""The actor half of an on-policy round: a part that the onpolicy workflow (onpolicy/workflow.py, with or without ARTOS
pipelines) and Stellaris's (stellaris/workflow.py) hold.

    start    a RoundState; the pre-warmer's ``await_warm`` and ``round_started``; the DataKeyTrigger sized for the
             learner's start (every actor's rows, or with ARTOS pipelines the first actor's) and re-armed; N actor
             functions invoked with their requests (each rank's slot sequence and the slot to restore, the resolved
             ``actors.env_backend``)
    ingest   a finished actor's rows into the Buffer (idempotent per invocation id), its slot, the round's counters
    finish   the round's end: the progress counters, the metrics row, the scaler's decision, the row's close

The row's bills, the non-finite guard and the scaler call are the run loop's book's (run/book.py); this part hands it
the facts of the round. ``LearnerBatch`` is what a round hands its learner (onpolicy/workflow.py's launches).

Example::

    actors = ActorRound(system=system, progress=progress, clock=clock, watch=workflow_watch)
    table.bind(name="invoke_learner", trigger=actors.data_trigger, action=invoke_learner)
    state = actors.start(index=progress.rounds, policy_version=progress.policy_version)
    actors.ingest(future=future, rank=rank)                  # each actor's event
    actors.finish(state=state, learned=LearnerResult.from_message(message), book=book)
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from nimbus.core import Book
from nimbus.data.codec import Message
from nimbus.data.result import invocation_id
from nimbus.data.triggers import DataKeyTrigger
from nimbus.envs.batched import resolve_backend
from nimbus.envs.obsnorm import merge, pop_moments
from nimbus.envs.slot_state import SlotState, pop_slot_state
from nimbus.models.weights import weights_key
from nimbus.nitro.probe import round_probe_extras
from nimbus.policy.system import System
from nimbus.roles.actor import ActorRequest, ActorResult
from nimbus.runtime.prewarm import PrewarmController, make_prewarmer
from nimbus.types import Progress, ScalingDecision


class Learned(Protocol):
    """What a round's learning tells its row: a learner function's ``LearnerResult`` (roles/learner.py), or
    Stellaris's aggregate over the gradients computed on the round's batch (``RoundLearning``)."""

    @property
    def policy_version(self) -> int: ...
    @property
    def stats(self) -> dict[str, float]: ...
    @property
    def transfer_s(self) -> float: ...
    @property
    def learning_s(self) -> float: ...
    @property
    def compute_s(self) -> float: ...
    @property
    def extras(self) -> dict[str, float]: ...


@dataclass(frozen=True)
class RoundLearning:
    """A round's learning that no single learner function reported (Stellaris: its gradients' mean statistics)."""

    policy_version: int
    stats: dict[str, float]
    learning_s: float
    compute_s: float
    transfer_s: float = 0.0
    extras: dict[str, float] = field(default_factory=dict)


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


@dataclass(frozen=True)
class LearnerBatch:
    """The rows a round hands its learner: their buffer ``indices`` (or, on Ray, the Store key they were shipped to),
    the round's observation moments, and header fields the launch adds (ARTOS pipelines: the stream to read)."""

    indices: np.ndarray
    batch_key: str | None = None
    obs_moments: dict[str, np.ndarray] | None = None
    header: dict[str, Any] = field(default_factory=dict)


class ActorRound:
    """N actor functions a round, their rows into the Buffer, and the round's row (see the module docstring).
    ``watch(kind=, future=, meta=)`` is the holding workflow's: it puts a finished function's event on its queue."""

    def __init__(self, *, system: System, progress: Progress, clock: Callable[[], float],
                 watch: Callable[..., None]) -> None:
        self.system, self.progress, self.clock, self.watch = system, progress, clock, watch
        self.rank_base = system.rank_base  # population members' actor ranks are disjoint (env slots, affinity, seeds)
        self.decision = system.scaler.initial()
        self.round: RoundState | None = None   # the round whose actors sample now (or last sampled)
        self.slot_seq: dict[int, int] = dict(progress.slot_seq)
        self.slot_states: dict[int, SlotState] = dict(progress.slot_states)
        self.restore_slots: dict[int, SlotState] = dict(progress.restore_slots)
        self.data_trigger = DataKeyTrigger(buffer=system.buffer, n_actors=self.decision.num_actors,
                                           size_rows=self.rows(self.decision.num_actors))
        self.prewarmer = _prewarmer(system=system)  # ARTOS workload monitor (prewarm.mode; no-op for none)
        cfg = system.config
        self.env_backend = resolve_backend(backend=cfg.actors.env_backend, env_id=cfg.env.id, kwargs=cfg.env.kwargs,
                                           custom=bool(cfg.env.imports or cfg.env.wrappers),
                                           snapshots=cfg.train.exact_resume or cfg.actors.restore_slots)

    @property
    def sampling(self) -> RoundState:
        """The round whose actors sample now (or last sampled); there is one once ``start`` ran."""
        if self.round is None:
            raise RuntimeError("no round has started (ActorRound.start)")
        return self.round

    def rows(self, num_actors: int) -> int:
        """The rows ``num_actors`` actors deliver in one round."""
        cfg = self.system.config
        return num_actors * cfg.env.num_envs_per_actor * cfg.actors.fragment_steps

    def start(self, *, index: int, policy_version: int, trigger_actors: int | None = None) -> RoundState:
        """Round ``index``'s actors sample with ``policy_version``; the data trigger fires when ``trigger_actors``
        of them (default: all) delivered their rows."""
        num_actors = self.decision.num_actors
        self.round = RoundState(index=index, policy_version=policy_version, decision=self.decision,
                                started_s=self.clock())
        self.prewarmer.await_warm()   # workers pre-warmed for this round (a scale-up's): ready before invoking
        self.prewarmer.round_started(num_actors=num_actors)
        armed = num_actors if trigger_actors is None else trigger_actors
        self.data_trigger.n_actors = armed
        self.data_trigger.size_rows = self.rows(armed)
        self.data_trigger.reset()
        for rank in range(num_actors):
            message = self._request(rank=rank, version=policy_version).to_message(restore=self._slot_to_restore(rank))
            future = self.system.runtime.invoke(spec=self.system.actor_spec, request=message)
            self.watch(kind="actor", future=future, meta=rank)
        return self.round

    def _request(self, *, rank: int, version: int) -> ActorRequest:
        cfg = self.system.config
        return ActorRequest(env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs), env_imports=list(cfg.env.imports),
                            env_wrappers=list(cfg.env.wrappers), num_envs=cfg.env.num_envs_per_actor,
                            fragment_steps=cfg.actors.fragment_steps, seed=cfg.seed,
                            actor_rank=self.rank_base + rank,
                            slot_seq=self.slot_seq.get(rank, self.progress.slot_seq_base), policy_version=version,
                            weights_key=weights_key(policy=self.system.policy, version=version),
                            algo=cfg.algo.model_dump(mode="json"), env_backend=self.env_backend,
                            snapshot=cfg.train.exact_resume or cfg.actors.restore_slots)

    def _slot_to_restore(self, rank: int) -> SlotState | None:
        """A resumed run's saved slot (first request only); with ``actors.restore_slots`` the rank's newest slot on
        every request, which the actor uses only when its worker lacks the slot (reclaimed, new, or a retry)."""
        restore = self.restore_slots.pop(rank, None)
        if restore is None and self.system.config.actors.restore_slots:
            restore = self.slot_states.get(rank)
        return restore

    def ingest(self, *, future: Future, rank: int) -> None:
        """A finished actor's rows into the Buffer; accepted (not a duplicate), its slot and the round's counters."""
        result: Message = future.result()  # raises FunctionFailed when retries are spent
        self.prewarmer.actor_finished()
        state, started = self.sampling, self.clock()
        done = ActorResult.from_message(result)
        moments = pop_moments(arrays=result.arrays)  # not a buffer column
        slot_state = pop_slot_state(header=result.header, arrays=result.arrays)  # nor is the env slot (exact resume)
        accepted = self.system.buffer.ingest(invocation_id=invocation_id(result) or f"{state.index}-{rank}",
                                             actor_rank=rank, policy_version=done.policy_version,
                                             arrays=result.arrays)
        if accepted:
            self.slot_seq[rank] = self.slot_seq.get(rank, self.progress.slot_seq_base) + 1
            if slot_state is not None:
                self.slot_states[rank] = slot_state
            state.obs_moments = merge(into=state.obs_moments, other=moments)
            state.episode_returns.extend(done.episode_returns)
            state.env_steps += done.env_steps
            state.sampling_s = max(state.sampling_s, done.sampling_s)
            state.work_s = max(state.work_s, done.env_s + done.inference_s)
        state.ingest_s += self.clock() - started

    def finish(self, *, state: RoundState, learned: Learned, book: Book,
               extras: dict[str, float] | None = None, num_learners: int = 1) -> None:
        """Round ``state`` ended with its learning ``learned``: the progress counters (and the slots a checkpoint
        saves), its metrics row, the scaler's decision for the next round's actors, the row closed in ``book``."""
        now, progress = self.clock(), self.progress
        progress.rounds += 1
        progress.slot_seq, progress.slot_states = dict(self.slot_seq), dict(self.slot_states)  # what a checkpoint saves
        progress.env_steps += state.env_steps
        book.add_episodes(returns=state.episode_returns)
        row = book.row(
            index=state.index, returns=state.episode_returns, num_actors=state.decision.num_actors,
            num_learners=num_learners, policy_version=learned.policy_version, now_s=now,
            sampling_s=state.sampling_s, transfer_s=state.ingest_s + learned.transfer_s,
            learning_s=learned.learning_s, round_s=now - state.started_s, losses=learned.stats,
            extras={"recent_return_mean": float(np.mean(progress.recent_returns)) if progress.recent_returns
                    else float("nan"), **_overhead(round_s=now - state.started_s, actor_work_s=state.work_s,
                                                   compute_s=learned.compute_s),
                    **round_probe_extras(extras=learned.extras, round_s=now - state.started_s),
                    **self.prewarmer.extras(), **(extras or {})})
        # the actors now running or last run (stellaris: the next round's); Nitro reads this round's probe
        row, self.decision = book.decide(row=row, scaler=self.system.scaler, prewarmer=self.prewarmer,
                                         actors_before=self.decision.num_actors)
        book.close(row=row)


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
