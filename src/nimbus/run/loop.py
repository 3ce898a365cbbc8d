"""``train(config)``: build the system, publish version 0, run the workflow, checkpoint, summarise.

Example::

    result = train(config=load_config(path=Path("configs/ppo-cartpole.yaml")))
    result.run_dir, result.summary.final_return
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nimbus.config import NimbusConfig
from nimbus.data.checkpoint import CheckpointState
from nimbus.envs.slot_state import slots_to_message
from nimbus.errors import CheckpointError, StoreUnavailable
from nimbus.models.weights import model_to_message, optim_key, weights_key
from nimbus.nitro.scaler import BUDGET_STOP_KEY
from nimbus.offpolicy.plan import Pacer
from nimbus.offpolicy.replay_checkpoint import (FILE_KEY as REPLAY_FILE_KEY, checkpoints_dir, load_replay, prune_replays,
                                            replay_message, restore_scaler, save_replay)
from nimbus.offpolicy.workflow import AsyncWorkflow
from nimbus.onpolicy.sync import SyncWorkflow
from nimbus.onpolicy.system import System
from nimbus.roles.remote import run_unless_store_lost
from nimbus.run.build import build, make_run_dir, peak_actors
from nimbus.run.evaluate import evaluate_policy
from nimbus.run.periodic_eval import PeriodicEvaluator
from nimbus.run.resume import (check_compatible, load_resume_state, progress_extra, progress_from,
                                 publish_checkpoint, resume_notice)
from nimbus.run.rundir import claim_run_dir
from nimbus.types import Progress, RoundMetrics

log = logging.getLogger(__name__)
PREWARM_WAIT_S = 120.0
ROWS_IN_MEMORY = 10_000  # rounds kept in TrainResult.rows (metrics.jsonl has them all)


@dataclass(frozen=True)
class RunSummary:
    """The end-of-run table (also written as summary.json)."""

    final_return: float | None          # mean over the last ``return_window`` training episodes
    eval_return: float | None           # mean over ``eval_episodes`` evaluation episodes of the final policy
    env_steps: int
    episodes: int
    rounds: int
    policy_version: int
    wall_s: float
    invocations: int
    attempts: int
    cold_starts: int
    retries: int
    serverless_cost_usd: float
    serverful_cost_usd: float
    stopped_by: str


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path
    summary: RunSummary
    rows: list[RoundMetrics]    # the newest ROWS_IN_MEMORY rounds of this call; metrics.jsonl has every round


class _Interrupt:
    """SIGINT/SIGTERM → stop at once, checkpoint the newest complete version, exit 0."""

    def __init__(self, *, workflow: SyncWorkflow) -> None:
        self.workflow = workflow
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_Interrupt":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name
        self.workflow.stop_requested = True

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _publish_initial(*, system: System) -> None:
    torch.manual_seed(system.config.seed)
    model = system.algo.make_model(spaces=system.spaces)
    system.store.put(key=weights_key(policy=system.policy, version=0), message=model_to_message(model=model, version=0))


def _should_stop(*, config: NimbusConfig, progress: Progress) -> str | None:
    if progress.last_row is not None and progress.last_row.extras.get(BUDGET_STOP_KEY) == 1.0:
        return "budget_spent"   # Nitro with on_budget: stop (the paper ends training when the budget is spent)
    if progress.env_steps >= config.train.total_env_steps:
        return "total_env_steps"
    if config.train.max_rounds is not None and progress.rounds >= config.train.max_rounds:
        return "max_rounds"
    target = config.train.target_return
    if target is not None and len(progress.recent_returns) >= config.train.return_window \
            and float(np.mean(progress.recent_returns)) >= target:
        return "target_return"
    target_eval = config.train.target_eval_return
    if target_eval is not None and progress.eval_return is not None and progress.eval_return >= target_eval:
        return "target_eval_return"
    return None


def save_checkpoint(*, system: System, progress: Progress, pacer: Pacer | None = None) -> Path:
    """The newest version's weights and optimizer state, counters and, with ``train.checkpoint_replay``, the
    replay buffer (``pacer``: the async workflow's) and the scaler's window in a file beside it."""
    version = progress.policy_version
    extra = progress_extra(progress=progress, total_env_steps=system.config.train.total_env_steps)
    if system.config.train.checkpoint_replay:
        async_parts = dict(buffer=system.buffer, replay=system.replay, pacer=pacer) if pacer is not None else {}
        directory = system.checkpointer.directory
        extra.update(save_replay(directory=directory, round=progress.rounds,
                                 message=replay_message(scaler=system.scaler, **async_parts)))
        prune_replays(directory=directory, keep=extra[REPLAY_FILE_KEY])
    weights = system.store.get(key=weights_key(policy=system.policy, version=version))
    optimizer = system.store.get(key=optim_key(policy=system.policy, version=version)) if version > 0 else None
    state = CheckpointState(weights=weights, optimizer=optimizer, policy_version=version, round=progress.rounds,
                            env_steps=progress.env_steps, episodes=progress.episodes,
                            config=system.config.model_dump(mode="json"), extra=extra,
                            actors=slots_to_message(states=progress.slot_states, slot_seq=progress.slot_seq)
                            if system.config.train.exact_resume and progress.slot_states else None)
    return system.checkpointer.save(state=state)


def train(*, config: NimbusConfig, run_dir: Path | None = None, resume_from: Path | None = None) -> TrainResult:
    """Train per ``config``; with ``resume_from`` (a run directory or checkpoint), continue from its newest
    checkpoint instead of version 0 (run/resume.py says what comes back). The run directory is this process's
    alone while it runs, and a new run never reuses one that holds files (run/rundir.py)."""
    if resume_from is not None and not Path(resume_from).exists():
        raise CheckpointError(f"cannot resume from {resume_from}: no such directory")
    in_place = resume_from is not None and _is_run_directory(path=Path(resume_from)) and \
        (run_dir is None or Path(run_dir).resolve() == Path(resume_from).resolve())
    run_dir = Path(resume_from) if in_place else Path(run_dir) if run_dir is not None else make_run_dir(config=config)
    with claim_run_dir(run_dir=run_dir, resuming=in_place):
        if config.train.workflow == "multiagent":  # MARLess: one policy per agent, shared by the controller
            from nimbus.marless.train import train_multiagent
            return train_multiagent(config=config, run_dir=run_dir, resume_from=resume_from)
        if config.policies or config.pbt is not None:  # several policies over one pool (pbt/population.py)
            from nimbus.pbt.population import train_population
            return train_population(config=config, run_dir=run_dir, resume_from=resume_from)
        return _train_one(config=config, run_dir=run_dir, resume_from=resume_from)


def _is_run_directory(*, path: Path) -> bool:
    """A run's own directory (resumed in place), not one of its ``checkpoints/`` or ``ckpt-*`` directories."""
    return (path / "checkpoints").is_dir() or (path / "policies").is_dir()


def _train_one(*, config: NimbusConfig, run_dir: Path, resume_from: Path | None) -> TrainResult:
    """One policy's run in the claimed ``run_dir``."""
    resumed = load_resume_state(path=resume_from) if resume_from is not None else None
    system = build(config=config, run_dir=run_dir)
    rows: deque[RoundMetrics] = deque(maxlen=ROWS_IN_MEMORY)  # bounded: a long run's driver stays flat (P13)
    most_actors = 1  # the most actors any round used (the serverful baseline reserves them for the whole run)
    progress = Progress() if resumed is None else progress_from(state=resumed)
    replay_state = load_replay(checkpoint_dir=checkpoints_dir(path=resume_from), extra=resumed.extra) \
        if resumed is not None and config.train.checkpoint_replay else None
    if replay_state is not None:   # the scaler's window now; the buffer when the async workflow starts
        restore_scaler(message=replay_state, scaler=system.scaler)
        progress.restore_replay = replay_state
    started = time.perf_counter()
    try:
        if resumed is None:
            _publish_initial(system=system)
        else:
            check_compatible(state=resumed, system=system)
            publish_checkpoint(state=resumed, system=system)
            log.warning("resuming from round %d (policy version %d, %d env steps)", resumed.round,
                        resumed.policy_version, resumed.env_steps)
            if (notice := resume_notice(state=resumed, current=config.model_dump(mode="json"))) is not None:
                log.warning("%s", notice)
        if config.runtime.prewarm:  # ready before round 0, so round 0 needs no extra cold starts
            system.runtime.prewarm(spec=system.learner_spec, count=1)
            system.runtime.prewarm(spec=system.actor_spec, count=peak_actors(config=config),
                                   wait_s=PREWARM_WAIT_S)
            system.runtime.prewarm(spec=system.learner_spec, count=0, wait_s=PREWARM_WAIT_S)
        if config.actors.preregister:  # stopped spares that scaling up wakes before any cold start
            system.runtime.preregister(spec=system.actor_spec, count=config.actors.preregister, wait_s=PREWARM_WAIT_S)

        evaluator = PeriodicEvaluator(config=config, env_steps=progress.env_steps) \
            if config.train.eval_every_env_steps is not None else None

        def on_round(row: RoundMetrics) -> None:
            nonlocal most_actors
            rows.append(row)
            most_actors = max(most_actors, row.num_actors)
            if evaluator is not None:
                row.extras.update(evaluator.maybe_evaluate(store=system.store, policy=system.policy, progress=progress))
            system.metrics.write(row=row, runtime=_runtime_scalars(system=system))
            if row.round % config.train.checkpoint_every_rounds == config.train.checkpoint_every_rounds - 1:
                save_checkpoint(system=system, progress=progress, pacer=_pacer(workflow))

        workflow_type = AsyncWorkflow if config.train.workflow == "async" else SyncWorkflow
        if config.train.workflow == "async_learners":   # Stellaris: stellaris/workflow.py
            from nimbus.stellaris.workflow import AsyncLearnersWorkflow
            workflow_type = AsyncLearnersWorkflow
        if config.pipeline.minibatch or config.pipeline.dual_stage:  # ARTOS pipelines: onpolicy/pipelined.py
            from nimbus.onpolicy.pipelined import PipelinedSyncWorkflow
            workflow_type = PipelinedSyncWorkflow
        workflow = workflow_type(system=system, progress=progress, on_round=on_round)
        stopped_by = "interrupted"
        with _Interrupt(workflow=workflow) as interrupt:
            lost_store = run_unless_store_lost(  # P12: a lost store stops cleanly, with a final checkpoint
                run=lambda: workflow.run(should_stop=lambda p: _should_stop(config=config, progress=p) is not None))
            stopped_by = ("store_unavailable" if lost_store else None) or interrupt.received or \
                _should_stop(config=config, progress=progress) or "interrupted"
        save_checkpoint(system=system, progress=progress, pacer=_pacer(workflow))
        summary = _summarise(system=system, progress=progress,
                             wall_s=time.perf_counter() - started + progress.wall_s_before,
                             stopped_by=stopped_by, cost_usd=workflow.cost_usd(),
                             peak_actors=most_actors)
    finally:
        system.close()
    (run_dir / "summary.json").write_text(json.dumps(asdict(summary), indent=1))
    if config.output.report:
        from nimbus.report.render import render_report
        render_report(run_dir=run_dir)
    if lost_store is not None:
        raise StoreUnavailable(f"{lost_store}; stopped cleanly after round {progress.rounds} with a final "
                               f"checkpoint in {run_dir / 'checkpoints'}")
    return TrainResult(run_dir=run_dir, summary=summary, rows=list(rows))


def _pacer(workflow: object) -> Pacer | None:
    return workflow.pacer if isinstance(workflow, AsyncWorkflow) else None


def _runtime_scalars(*, system: System) -> dict[str, float]:
    stats = system.runtime.stats()
    return {k: float(v) for k, v in asdict(stats).items() if isinstance(v, (int, float))}


def _summarise(*, system: System, progress: Progress, wall_s: float, stopped_by: str, cost_usd: float,
               peak_actors: int) -> RunSummary:
    config = system.config
    totals = system.ledger.totals()
    eval_return = None
    if config.train.eval_episodes > 0 and stopped_by not in ("SIGINT", "SIGTERM"):
        weights = system.store.get(key=weights_key(policy=system.policy, version=progress.policy_version))
        eval_return = evaluate_policy(config=config, weights=weights, episodes=config.train.eval_episodes,
                                      seed=config.seed + 10_000, explore=config.train.eval_explore).mean_return
    serverful = system.pricing.serverful_cost_usd(
        wall_s=wall_s, peak_actor_cpus=peak_actors * config.actors.function.cpus,
        peak_learner_gpus=config.learner.function.gpus)
    return RunSummary(
        final_return=float(np.mean(progress.recent_returns)) if progress.recent_returns else None,
        eval_return=eval_return, env_steps=progress.env_steps, episodes=progress.episodes, rounds=progress.rounds,
        policy_version=progress.policy_version, wall_s=wall_s, invocations=totals.invocations,
        attempts=totals.attempts, cold_starts=totals.cold_starts, retries=totals.retries,
        serverless_cost_usd=cost_usd, serverful_cost_usd=serverful, stopped_by=stopped_by)
