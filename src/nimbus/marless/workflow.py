"""The ``marless`` workflow (MARLess §4, Fig. 4): rounds of multi-agent actors, then each policy's learner
functions, then the sharing and actor-scaling controllers.

    round k:  I actor functions            each runs env copies with ALL agents; an agent acts with the policy
              (marless/actor.py)      the agent→policy map gives it; its rows come back under <agent>/
              ingest                       every active policy's rows (its agents', actors in rank order) →
                                           Store ``batch/<policy>/r<k>``
              learner roles per policy     in the algorithm's order (MARLess Fig. 5): postprocess → critic →
                                           policy; the policies of one role run concurrently, each its own
                                           invocation (``kind`` = role in the ledger)
              controllers                  the detector may toggle sharing (a new agent→policy map: fewer
                                           policies, fewer learner invocations); the scaler sets I for k+1

A frozen policy (its agents share another's) is neither sampled with nor trained. Switching sharing off
gives every agent its own policy again, whose next version is a copy of its group policy's newest weights
(and critic and optimizer states), so no agent starts over (marless/versions.py).
"""

from __future__ import annotations

import json
import logging
import queue
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from nimbus.algos.multiagent import make_multiagent_algo
from nimbus.config import NimbusConfig
from nimbus.core import UNBOOKED, Book
from nimbus.data.checkpoint import Checkpointer
from nimbus.data.codec import Message
from nimbus.envs.slot_state import pop_slot_state
from nimbus.errors import CheckpointError
from nimbus.marless.actor import MultiAgentActorRequest, MultiAgentActorResult
from nimbus.marless.agent_id import uses_agent_id
from nimbus.marless.checkpoint import policy_directory, save_policies
from nimbus.marless.evaluate import MarlessEvalResult, evaluate_agents
from nimbus.marless.learning import batch_key, make_learning, nonfinite_round, results_of
from nimbus.marless.parts import (
    MarlessParts,
    MarlessProgress,
    check_agent_policy,
    fixed_actors,
    function_specs,
    policy_spaces,
    probe_agents,
)
from nimbus.marless.rows import Episodes, dead_fraction, live_samples, policy_batch
from nimbus.marless.scaling import MarlessActorScaler
from nimbus.marless.sharing import SharingController, space_signature
from nimbus.marless.versions import adopt_map, forget_versions, publish_versions
from nimbus.models.weights import weights_key
from nimbus.report.metrics import MetricsSink
from nimbus.runtime.base import event_queue, runtime_clock
from nimbus.runtime.prewarm import make_prewarmer
from nimbus.types import RoundMetrics, Shared

log = logging.getLogger(__name__)
LEARNER_ROLES = ("postprocess", "critic", "policy")


@dataclass
class Sampling:
    """A round whose actors sample: the actor results that landed so far, by rank."""

    index: int
    started_s: float
    agent_policy: dict[str, str]
    num_actors: int
    futures: dict[int, Future] = field(default_factory=dict)


class MarlessWorkflow:
    """MARLess rounds, driven by the run loop (run/members.py); ``on_round`` receives each round's row (core.Workflow).

    ``build`` publishes every policy's version 0 or the checkpoint's versions itself: the progress it continues
    from (versions, the agent→policy map, the controllers' state) comes out of publishing, and the workflow's
    learning and actor count are made from it; ``start`` has nothing left to do (no pre-warm)."""

    poll_period_s = 0.5   # no trigger runs on the clock: a poll only follows an event
    checkpointers: dict[str, Checkpointer]   # policy → its checkpoints' directory (set by ``build``)

    def __init__(self, *, parts: MarlessParts, progress: MarlessProgress) -> None:
        self.parts = parts
        self.progress = progress
        self.book: Book = UNBOOKED   # the run loop's (attach)
        self._usd_by_kind: dict[str, float] = {}   # the book's per-kind dollars at the last round's end
        self.stop_requested = False
        self.clock = runtime_clock(runtime=parts.shared.runtime)   # simulated seconds on runtime.backend: simulated
        self.num_actors = progress.next_actors or parts.scaler.initial()
        self.learning = make_learning(parts=parts, progress=progress)
        self.prewarmer = make_prewarmer(config=parts.config, runtime=parts.shared.runtime, ledger=parts.shared.ledger,
                                        actor_spec=parts.specs["actor"], workload=parts.config.name)  # prewarm.mode
        self._map_log = open(parts.run_dir / "marless.jsonl", "a", buffering=1)
        self.events: queue.Queue[tuple[str, Future, Any]] = event_queue(runtime=parts.shared.runtime)
        self.sampling: Sampling | None = None   # the round whose actors sample now

    # ---------------------------------------------------------------------------- core.Workflow
    @classmethod
    def build(cls, *, config: NimbusConfig, shared: Callable[[], Shared], run_dir: Path, policy: str,
              resume_from: Path | None, rank_base: int = 0, workload: str | None = None) -> MarlessWorkflow:
        """The env's agents and the controllers (exit 2 on a bad ``marless.agent_policy`` before any worker), the pool,
        then every policy's version 0 or (``resume_from``, a run directory) the newest round every policy has a
        checkpoint of (marless/checkpoint.py says what comes back). ``policy``, ``rank_base`` and ``workload``
        do not apply: the policies are named after the agents."""
        if resume_from is not None and not (Path(resume_from) / "policies").is_dir():
            raise CheckpointError(f"cannot resume {resume_from} as a marless run: it has no policies/ directory")
        agents, spaces, state_dim = probe_agents(config=config)
        check_agent_policy(config=config, agents=agents)
        algo = make_multiagent_algo(config=config.algo)
        sharing = SharingController(config=config.marless, agents=list(agents), seed=config.seed,
                                    compatible={a: space_signature(spaces=spaces[a]) for a in agents})
        scaler = MarlessActorScaler(config=config.marless, num_agents=len(agents),
                                    fixed_actors=fixed_actors(config=config))
        pool = shared()
        metrics = MetricsSink(run_dir=run_dir,
                              status_line=config.output.status_line)
        agent_id = uses_agent_id(marless=config.marless)
        parts = MarlessParts(config=config, shared=pool, run_dir=run_dir, agents=agents, spaces=spaces, algo=algo,
                             specs=function_specs(config=config, algo=algo), sharing=sharing, scaler=scaler,
                             metrics=metrics, agent_id=agent_id, state_dim=state_dim,
                             policy_spaces=policy_spaces(config=config, agents=agents, spaces=spaces,
                                                         agent_id=agent_id))
        try:
            progress = publish_versions(parts=parts, resume_from=resume_from)
        except BaseException:
            metrics.close()
            raise
        workflow = cls(parts=parts, progress=progress)
        workflow.checkpointers = {name: Checkpointer(directory=policy_directory(run_dir=run_dir, policy=name),
                                                     keep=config.train.keep_checkpoints)
                                  for name in parts.policy_spaces}
        return workflow

    @property
    def metrics(self) -> MetricsSink:
        return self.parts.metrics

    def start(self) -> None:
        """Nothing: ``build`` published every policy's version (see the class docstring)."""

    def request_stop(self) -> None:
        """Stop at the next event; the round in progress is not counted (safe in a signal handler: it sets a flag)."""
        self.stop_requested = True

    def checkpoint(self) -> None:
        """Each policy's newest networks and the run's state, in ``policies/<policy>/checkpoints``."""
        save_policies(parts=self.parts, progress=self.progress, checkpointers=self.checkpointers)

    def evaluate(self, *, episodes: int, seed: int, explore: bool) -> MarlessEvalResult:
        """``episodes`` episodes with every agent on its policy's newest version (``explore`` is not used: the
        final evaluation of a MARLess run acts greedily, as it always has)."""
        store, progress = self.parts.shared.store, self.progress
        newest = {policy: store.get(key=weights_key(policy=policy, version=version))
                  for policy, version in progress.versions.items()}
        return evaluate_agents(config=self.parts.config, algo=self.parts.algo, weights=newest,
                               agent_policy=progress.agent_policy, episodes=episodes, seed=seed)

    def close(self) -> None:
        self.prewarmer.close()
        self._map_log.close()
        self.metrics.close()

    # ------------------------------------------- the run loop's contract (run/members.py drives every workflow)
    # A round is a small state machine: ``_start_round`` invokes the actors (sampling), each actor's event is held
    # until the last one lands, then ``_end_round`` ingests, runs every policy's learner roles (their own
    # invocations, awaited in MARLess's role order: marless/learning.py) and the controllers, and writes the row.
    def attach(self, *, events: Any, book: Book) -> None:
        """Put this workflow's events on ``events`` (anything with ``put``: the driver's tagged queue) and its
        rounds' facts in ``book`` (run/book.py)."""
        self.events, self.book = events, book

    def publish(self) -> None:
        """Nothing: ``build`` published every policy's version (see the class docstring)."""

    def prewarm(self) -> None:
        """Nothing: the actors pre-warm through ``prewarm.mode`` (runtime/prewarm.py), not before round 0."""

    def begin(self) -> None:
        self._start_round()

    def poll(self, *, now_s: float) -> None:
        """The next round starts once the last one ended (no trigger runs on the clock)."""
        if self.sampling is None and not self.stop_requested:
            self._start_round()

    def handle(self, *, kind: str, future: Future, meta: Any) -> bool:
        """An actor's result; True when it was the round's last and the round ended (its row written)."""
        sampling = self.sampling
        if sampling is None:   # actors run only inside a round, which ends with its last actor's result
            raise RuntimeError(f"an actor result (rank {meta}) arrived with no round sampling")
        sampling.futures[meta] = future
        if len(sampling.futures) < sampling.num_actors:
            return False
        self.sampling = None
        self.book.close(row=self._end_round(sampling=sampling))
        return True

    def exhausted(self) -> bool:
        return False

    def renewed(self) -> MarlessWorkflow:
        raise NotImplementedError("a MARLess run is not a population member")

    def _start_round(self) -> None:
        self.sampling = Sampling(index=self.progress.rounds, started_s=self.clock(),
                                 agent_policy=dict(self.progress.agent_policy), num_actors=self.num_actors)
        self._invoke_actors(agent_policy=self.sampling.agent_policy, num_actors=self.num_actors)

    def _end_round(self, *, sampling: Sampling) -> RoundMetrics:
        index, started, agent_policy = sampling.index, sampling.started_s, sampling.agent_policy
        active = sorted(set(agent_policy.values()))
        results = self._sampled(futures=[sampling.futures[rank] for rank in range(sampling.num_actors)])
        sampled = self.clock()
        episodes = self._ingest(results=results, agent_policy=agent_policy, active=active, round=index)
        ingested = self.clock()
        rows_per_agent = self.num_actors * self.parts.config.env.num_envs_per_actor * \
            self.parts.config.actors.fragment_steps
        self.learning.probe_now(agent_returns=episodes.agent_means)
        invoked = self.progress.learner_invocations
        stats, stale = self.learning.run(active=active, agent_policy=agent_policy, round=index,
                                         rows_per_agent=rows_per_agent)
        self.prewarmer.round_finished()
        self.book.count_nonfinite(nonfinite=nonfinite_round(stats=stats), what="rounds of learners")
        self.progress.policy_version = sum(self.progress.versions.values())
        learned = self.clock()
        forget_versions(parts=self.parts, progress=self.progress, active=active, stale=stale)
        convexity = {policy: stats[policy].get("convexity", float("nan")) for policy in active}
        new_map = self.parts.sharing.decide(round=index, agent_returns=episodes.agent_means,
                                            samples=episodes.samples,
                                            convexity={agent: convexity[agent_policy[agent]] for agent in agent_policy})
        if new_map is not None and new_map != agent_policy:
            adopt_map(parts=self.parts, progress=self.progress, old=agent_policy, new=new_map)
        self.parts.scaler.observe(convexity=convexity)
        used_actors, self.num_actors = self.num_actors, self.parts.scaler.decide()
        self.prewarmer.scale_up(from_actors=used_actors, to_actors=self.num_actors)  # warm when the next round starts
        self.progress.next_actors = self.num_actors
        return self._row(index=index, started=started, sampled=sampled, ingested=ingested, learned=learned,
                         episodes=episodes, stats=stats, active=active, agent_policy=agent_policy,
                         num_actors=used_actors, invocations=self.progress.learner_invocations - invoked)

    # ----------------------------------------------------------------------------------- sampling
    def _invoke_actors(self, *, agent_policy: dict[str, str], num_actors: int) -> None:
        cfg = self.parts.config
        keys = {p: weights_key(policy=p, version=self.progress.versions[p]) for p in set(agent_policy.values())}
        self.prewarmer.await_warm()
        self.prewarmer.round_started(num_actors=num_actors)
        for rank in range(num_actors):
            slot_seq = self.progress.slot_seq.get(rank, self.progress.slot_seq_base)  # resumed: from the checkpoint
            request = MultiAgentActorRequest(
                env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs), num_envs=cfg.env.num_envs_per_actor,
                fragment_steps=cfg.actors.fragment_steps, seed=cfg.seed, actor_rank=rank,
                slot_seq=slot_seq, agent_policy=dict(agent_policy), weights_keys=keys,
                algo=cfg.algo.model_dump(mode="json"), env_imports=tuple(cfg.env.imports),
                snapshot=cfg.actors.restore_slots, agent_id=self.parts.agent_id)
            future = self.parts.shared.runtime.invoke(
                spec=self.parts.specs["actor"], request=request.to_message(restore=self.progress.slot_states.get(rank)))
            future.add_done_callback(partial(self._actor_done, rank=rank))

    def _actor_done(self, future: Future, *, rank: int) -> None:
        """The actor's future is done: its event goes to the run loop (a done callback, so the future is positional)."""
        self.prewarmer.actor_finished()
        self.events.put(("actor", future, rank))

    def _sampled(self, *, futures: list[Future]) -> list[Message]:
        """The round's actor results in rank order (the first failure, after the runtime's retries, stops the run);
        each rank's slot sequence and env slot (``actors.restore_slots``) advance: what a checkpoint saves."""
        results = results_of(futures=futures, what="actor")
        progress = self.progress
        for rank, result in enumerate(results):
            progress.slot_seq[rank] = progress.slot_seq.get(rank, progress.slot_seq_base) + 1
            state = pop_slot_state(header=result.header, arrays=result.arrays)
            if state is not None:
                progress.slot_states[rank] = state
            else:                                    # never send a slot older than the rank's sequence
                progress.slot_states.pop(rank, None)
        return results

    def _ingest(self, *, results: list[Message], agent_policy: dict[str, str], active: list[str],
                round: int) -> Episodes:
        """Each active policy's batch into the Store; per-agent returns and similarity samples."""
        agents = list(self.parts.agents)
        actor_results = [MultiAgentActorResult.from_message(result) for result in results]
        episodes = Episodes.collect(results=actor_results, agents=agents)
        self.progress.env_steps += sum(result.env_steps for result in actor_results)
        for policy in active:
            members = [a for a in agents if agent_policy[a] == policy]
            self.parts.shared.store.put(key=batch_key(policy=policy, round=round),
                                        message=policy_batch(results=results, members=members, agents=agents,
                                                             agent_id=self.parts.agent_id))
        for agent in agents:
            episodes.samples[agent] = live_samples(results=results, agent=agent)
            episodes.dead_rows[agent] = dead_fraction(results=results, agent=agent)
        return episodes

    # ----------------------------------------------------------------------------------- the row
    def _row(self, *, index: int, started: float, sampled: float, ingested: float, learned: float,
             episodes: Episodes, stats: dict[str, dict[str, float]], active: list[str],
             agent_policy: dict[str, str], num_actors: int, invocations: int) -> RoundMetrics:
        progress, now = self.progress, self.clock()
        progress.rounds += 1
        self.book.add_episodes(returns=episodes.global_returns)
        extras: dict[str, float] = {
            "marless/policies": float(len(active)), "marless/actors": float(num_actors),
            "marless/learner_invocations": float(invocations),   # the learner functions this round invoked
            **{f"marless/return/{agent}": value for agent, value in episodes.agent_means.items()},
            **{f"marless/dead_rows/{agent}": value for agent, value in episodes.dead_rows.items()},
            **{f"marless/{k}": float(v) for k, v in self.parts.sharing.state().items()},
            **{f"marless/{k}": float(v) for k, v in self.parts.scaler.state().items()},
            **self.prewarmer.extras(),
        }
        if episodes.global_returns:
            extras["marless/global_return"] = float(np.mean(episodes.global_returns))
        losses = {f"{policy}/{k}": v for policy in active for k, v in stats[policy].items()}
        self._map_log.write(json.dumps({"round": index, "agent_policy": agent_policy, "actors": num_actors,
                                        "policies": active}) + "\n")
        row = self.book.row(   # bills the round (its provisioned time first), so the split below is this round's
            index=index, returns=episodes.global_returns, num_actors=num_actors, num_learners=len(active),
            policy_version=progress.policy_version, now_s=now, sampling_s=sampled - started,
            transfer_s=ingested - sampled, learning_s=learned - ingested, round_s=now - started, losses=losses,
            extras=extras)
        costs = self._round_cost_by_kind()
        row.extras.update({"marless/actor_cost_usd": costs.get("actor", 0.0),
                           "marless/learner_cost_usd": sum(v for k, v in costs.items() if k in LEARNER_ROLES)})
        return row

    def _round_cost_by_kind(self) -> dict[str, float]:
        """This round's dollars per function kind (the book's running figures since the last round's end)."""
        by_kind = self.book.meter.usd_by_kind()
        round_usd = {kind: usd - self._usd_by_kind.get(kind, 0.0) for kind, usd in by_kind.items()}
        self._usd_by_kind = by_kind
        return round_usd
