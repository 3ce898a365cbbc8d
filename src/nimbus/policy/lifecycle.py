"""The Workflow contract's lifecycle for every workflow over one System (core.Workflow): onpolicy (pipelined too),
offpolicy and stellaris have ``SystemWorkflow`` as their one base and add only their rounds;
what their rounds share they hold as parts (onpolicy/actor_round.py), never by subclassing another workflow. It lives
in policy/, below the technique folders, so that a workflow builds on it without importing another technique's.

    build     the policy's data (spaces, algorithm, scaler, buffer: exit 2 before any worker), then the
              shared pool (``shared()``), then the functions ``functions`` names (policy/build.py); a resumed
              run reads its checkpoint (and train.checkpoint_replay's file) first
    publish   version 0 (seeded) or the checkpoint's weights and optimizer state, checked against this config
    start     publish, then pre-warm and pre-register (runtime.prewarm, actors.preregister)
    checkpoint  the newest version's weights and optimizer state, the counters and, with checkpoint_replay,
              the replay file beside it (policy/replay_checkpoint.py)
    evaluate  episodes of the newest version (roles/evaluate.py)

Example (what run/loop.py does)::

    workflow = OnPolicyWorkflow.build(config=config, shared=lambda: shared, run_dir=run_dir, policy="main",
                                  resume_from=None)
    workflow.start()
    ...                                          # rounds: run/members.py's drive hands it events
    workflow.checkpoint()
    workflow.close()
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import torch

from nimbus.config import NimbusConfig, parse_config
from nimbus.core import Book
from nimbus.data.checkpoint import CheckpointState
from nimbus.data.resume import load_resume_state, progress_extra, resume_notice, schedule_horizon
from nimbus.envs.slot_state import slots_from_message, slots_to_message
from nimbus.errors import CheckpointError
from nimbus.models.weights import load_model, model_to_message, optim_key, weights_key
from nimbus.policy.build import BufferPlan, PolicyFunctions, build_policy, peak_actors, policy_data, probe_spaces
from nimbus.policy.replay_checkpoint import (
    FILE_KEY as REPLAY_FILE_KEY,
    checkpoints_dir,
    load_replay,
    prune_replays,
    replay_message,
    restore_scaler,
    save_replay,
)
from nimbus.policy.system import System
from nimbus.roles.evaluate import EvalResult, evaluate_policy

if TYPE_CHECKING:
    from nimbus.runtime.base import FunctionSpec
    from nimbus.types import Progress, Shared

log = logging.getLogger(__name__)
PREWARM_WAIT_S = 120.0
MAX_DIFFERENCES_SHOWN = 8
W = TypeVar("W", bound="SystemWorkflow")


@runtime_checkable
class Preregistering(Protocol):
    """A runtime that can start stopped spare workers: the local one (and StampedRuntime over it); the config
    allows ``actors.preregister`` on no other backend (config/root.py), so core.Runtime does not promise it.

    Example::

        runtime.preregister(spec=actor_spec, count=4, wait_s=PREWARM_WAIT_S)   # 4 spares, asleep once ready
    """

    def preregister(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None: ...


def prewarm_round_zero(*, runtime: Any, learner_spec: FunctionSpec, learners: int, actor_spec: FunctionSpec,
                       actors: int) -> None:
    """Start ``learners`` learner and ``actors`` actor workers side by side, then wait for both kinds (up to
    ``PREWARM_WAIT_S`` each), so round 0 pays no cold start: a single run's lifecycle and a population's."""
    runtime.prewarm(spec=learner_spec, count=learners)
    runtime.prewarm(spec=actor_spec, count=actors, wait_s=PREWARM_WAIT_S)
    runtime.prewarm(spec=learner_spec, count=0, wait_s=PREWARM_WAIT_S)


class SystemWorkflow:
    """build/publish/start/checkpoint/evaluate/close, attach and renewed of a workflow over one System; a workflow
    sets ``progress``, ``stop_requested``, ``events`` and ``book`` in ``__init__(*, system, progress)`` and adds its
    rounds (begin, handle, poll, exhausted).

    A base rather than a part: the loop calls these methods on the workflow itself, and ``build`` constructs the
    class it is called on, so a part would leave every workflow a dozen forwarding methods."""

    system: System
    progress: Progress
    progress_type: type   # onpolicy/workflow.py's Progress (OnPolicyWorkflow and OffPolicyWorkflow set it)
    stop_requested: bool
    events: Any           # anything with ``put``: the workflow's own queue until the loop attaches its tagged one
    book: Book            # core.UNBOOKED until the loop attaches its RoundBook
    resumed: CheckpointState | None = None   # the checkpoint ``publish`` puts back; None: version 0

    def __init__(self, *, system: System, progress: Progress) -> None:
        """The constructor ``build`` and ``renewed`` call; each workflow writes its own."""
        raise NotImplementedError(f"{type(self).__name__} over one System defines __init__(*, system, progress)")

    @classmethod
    def build(cls: type[W], *, config: NimbusConfig, shared: Callable[[], Shared], run_dir: Path, policy: str,
              resume_from: Path | None, rank_base: int = 0, workload: str | None = None) -> W:
        """The System (``workload``: its functions are named ``<workload>/actor``...), the progress to continue
        from, and the workflow over them."""
        resumed = load_resume_state(path=resume_from) if resume_from is not None else None
        # a buffer that shared memory cannot hold: exit 2 before any worker
        data = policy_data(config=config, replay_for=cls.buffer_plan)
        try:
            pool = shared()
        except BaseException:
            data.buffer.close(unlink=True)
            raise
        system = build_policy(config=config, shared=pool, run_dir=run_dir, policy=policy, owns_shared=False,
                              functions=cls.functions(config=config), rank_base=rank_base, data=data)
        if workload is not None:   # several workloads on one pool: each its own warm workers and ledger rows
            system.actor_spec = replace(system.actor_spec, name=f"{workload}/actor", workload=workload)
            system.learner_spec = replace(system.learner_spec, name=f"{workload}/learner", workload=workload)
        progress = cls.progress_type() if resumed is None else \
            progress_from(state=resumed, progress_type=cls.progress_type)
        replay_state = load_replay(checkpoint_dir=checkpoints_dir(path=resume_from), extra=resumed.extra) \
            if resume_from is not None and resumed is not None and config.train.checkpoint_replay else None
        if replay_state is not None:   # the scaler's window now; the buffer when the offpolicy workflow starts
            restore_scaler(message=replay_state, scaler=system.scaler)
            progress.restore_replay = replay_state
        workflow = cls(system=system, progress=progress)
        workflow.resumed = resumed
        return workflow

    @classmethod
    def functions(cls, *, config: NimbusConfig) -> PolicyFunctions:
        """The actor and learner functions this workflow invokes; each workflow names its own."""
        raise NotImplementedError(f"{cls.__name__} names the functions it invokes (functions(*, config))")

    @classmethod
    def buffer_plan(cls, *, config: NimbusConfig, guard_rows: int) -> BufferPlan | None:
        """The replay this workflow samples and the buffer rows it keeps; None: each round's whole batch."""
        return None

    @property
    def metrics(self):  # noqa: ANN201 - report/metrics.py MetricsSink
        return self.system.metrics

    def publish(self) -> None:
        """Version 0, or the checkpoint's version once it is checked against this config."""
        system, state = self.system, self.resumed
        if state is None:
            publish_initial(system=system)
            return
        check_compatible(state=state, system=system)
        publish_checkpoint(state=state, system=system)
        log.warning("%s from round %d (policy version %d, %d env steps)", "resuming" if system.policy == "main"
                    else f"member {system.policy} resumes", state.round, state.policy_version, state.env_steps)
        if system.policy == "main" and (notice := resume_notice(
                state=state, current=system.config.model_dump(mode="json"))) is not None:
            log.warning("%s", notice)

    def peak_actors(self) -> int:
        """The most actor functions this policy's scaler may launch in one round."""
        return peak_actors(config=self.system.config)

    def prewarm(self) -> None:
        """Workers ready before round 0 (``runtime.prewarm``), so round 0 needs no extra cold starts."""
        system = self.system
        if system.config.runtime.prewarm:
            prewarm_round_zero(runtime=system.runtime, learner_spec=system.learner_spec, learners=1,
                               actor_spec=system.actor_spec, actors=self.peak_actors())

    def start(self) -> None:
        """publish, prewarm, and the stopped spares that scaling up wakes before any cold start."""
        self.publish()
        self.prewarm()
        config, runtime = self.system.config, self.system.runtime
        if config.actors.preregister:
            if not isinstance(runtime, Preregistering):
                raise TypeError(f"actors.preregister: {type(runtime).__name__} cannot preregister workers")
            runtime.preregister(spec=self.system.actor_spec, count=config.actors.preregister, wait_s=PREWARM_WAIT_S)

    def attach(self, *, events: Any, book: Book) -> None:
        """Put this workflow's events on ``events`` (anything with ``put``: the driver's tagged queue) and its
        rounds' facts in ``book`` (run/book.py)."""
        self.events, self.book = events, book

    def renewed(self: W) -> W:
        """A new workflow over this one's System and progress (a population member re-seeded after a failure)."""
        return type(self)(system=self.system, progress=self.progress)

    def request_stop(self) -> None:
        """Stop at the next event (safe in a signal handler: it sets a flag)."""
        self.stop_requested = True

    def replay_parts(self) -> dict:
        """What ``train.checkpoint_replay`` keeps besides the scaler (the offpolicy workflow: its buffer)."""
        return {}

    def checkpoint_extra(self) -> dict:
        """What this workflow adds to the checkpoint's ``extra`` (stellaris: its aggregation rule's state);
        it reads it back from ``self.resumed.extra`` when it starts."""
        return {}

    def checkpoint(self) -> Path:
        """The newest version's checkpoint (run/loop.py calls it when one is due and at the end)."""
        system, progress = self.system, self.progress
        version = progress.policy_version
        extra = progress_extra(progress=progress, total_env_steps=system.config.train.total_env_steps)
        extra.update(self.checkpoint_extra())
        if system.config.train.checkpoint_replay:
            directory = system.checkpointer.directory
            extra.update(save_replay(directory=directory, round=progress.rounds,
                                     message=replay_message(scaler=system.scaler, **self.replay_parts())))
            prune_replays(directory=directory, keep=extra[REPLAY_FILE_KEY])
        weights = system.store.get(key=weights_key(policy=system.policy, version=version))
        optimizer = system.store.get(key=optim_key(policy=system.policy, version=version)) if version > 0 else None
        state = CheckpointState(weights=weights, optimizer=optimizer, policy_version=version, round=progress.rounds,
                                env_steps=progress.env_steps, episodes=progress.episodes,
                                config=system.config.model_dump(mode="json"), extra=extra,
                                actors=slots_to_message(states=progress.slot_states, slot_seq=progress.slot_seq)
                                if system.config.train.exact_resume and progress.slot_states else None)
        return system.checkpointer.save(state=state)

    def evaluate(self, *, episodes: int, seed: int, explore: bool) -> EvalResult:
        """``episodes`` episodes of the newest version on seeds ``seed``, ``seed + 1``..."""
        system = self.system
        weights = system.store.get(key=weights_key(policy=system.policy, version=self.progress.policy_version))
        return evaluate_policy(config=system.config, weights=weights, episodes=episodes, seed=seed, explore=explore)

    def close(self) -> None:
        self.system.close()


def publish_initial(*, system: System) -> None:
    """Version 0 of the policy, seeded with the run's seed."""
    torch.manual_seed(system.config.seed)
    model = system.algo.make_model(spaces=system.spaces)
    system.store.put(key=weights_key(policy=system.policy, version=0), message=model_to_message(model=model, version=0))
def check_compatible(*, state: CheckpointState, system: System) -> None:
    """Refuse a checkpoint of another algorithm or network before any worker sees it."""
    saved_algo = state.config.get("algo", {}).get("name")
    if saved_algo != system.config.algo.name:
        raise CheckpointError(f"the checkpoint was trained with algo.name={saved_algo!r}; this config has "
                              f"algo.name={system.config.algo.name!r}")
    saved_env = state.config.get("env", {})
    if state.actors is not None and (saved_env.get("id"), saved_env.get("num_envs_per_actor")) != \
            (system.config.env.id, system.config.env.num_envs_per_actor):
        raise CheckpointError(f"the checkpoint's env slots are {saved_env.get('num_envs_per_actor')} × "
                              f"{saved_env.get('id')} per actor; this config runs "
                              f"{system.config.env.num_envs_per_actor} × {system.config.env.id} (an exact resume "
                              "needs the same envs)")
    if state.policy_version > 0 and state.optimizer is None:
        raise CheckpointError(f"the checkpoint of policy version {state.policy_version} has no optimizer state")
    model = system.algo.make_model(spaces=system.spaces)
    differences = network_differences(state=state, model=model)
    if differences:
        differences = env_differences(state=state, system=system) + differences
        more = len(differences) - MAX_DIFFERENCES_SHOWN
        shown = "; ".join(differences[:MAX_DIFFERENCES_SHOWN]) + (f"; and {more} more" if more > 0 else "")
        raise CheckpointError(f"the checkpoint's weights do not fit the network this config builds: {shown}")
    load_model(model=model, message=state.weights)


def network_differences(*, state: CheckpointState, model: torch.nn.Module) -> list[str]:
    """Each parameter whose shape differs between the checkpoint and ``model``, or that only one of them has."""
    built = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    saved = {name[len("param."):]: tuple(array.shape) for name, array in state.weights.arrays.items()
             if name.startswith("param.")}
    return [f"{name}: checkpoint {saved.get(name, 'absent')}, this config {built.get(name, 'absent')}"
            for name in sorted(built.keys() | saved.keys()) if built.get(name) != saved.get(name)]


def env_differences(*, state: CheckpointState, system: System) -> list[str]:
    """The env id and spaces of the checkpoint's run where they differ from this config's."""
    saved_config = parse_config(data=state.config)
    if saved_config.env.id == system.config.env.id and saved_config.env.kwargs == system.config.env.kwargs:
        return []
    found = [f"env.id: checkpoint {saved_config.env.id!r}, this config {system.config.env.id!r}"]
    try:
        saved = probe_spaces(config=saved_config)
    except Exception as exc:  # noqa: BLE001 - the checkpoint's env may not be installed here: say so, go on
        return found + [f"(the checkpoint's env cannot be made here to compare its spaces: {exc})"]
    for name in ("observation", "action"):
        if getattr(saved, name) != getattr(system.spaces, name):
            found.append(f"{name} space: checkpoint {getattr(saved, name)}, this config {getattr(system.spaces, name)}")
    return found


def publish_checkpoint(*, state: CheckpointState, system: System) -> None:
    """Put the checkpoint's weights and optimizer state in the Store as the system's policy's version."""
    system.store.put(key=weights_key(policy=system.policy, version=state.policy_version), message=state.weights)
    if state.optimizer is not None:
        system.store.put(key=optim_key(policy=system.policy, version=state.policy_version), message=state.optimizer)


def progress_from(*, state: CheckpointState, progress_type: type) -> Progress:
    """The counters to continue from; with the actors' env slots (``train.exact_resume``) each rank's first
    request rebuilds its envs exactly, otherwise envs start fresh episodes from seeds of the resumed round."""
    extra = state.extra
    slots, slot_seq = slots_from_message(message=state.actors) if state.actors is not None else ({}, {})
    return progress_type(rounds=state.round, env_steps=state.env_steps, episodes=state.episodes,
                         policy_version=state.policy_version,
                         recent_returns=[float(r) for r in extra.get("recent_returns", [])],
                         nonfinite_in_a_row=int(extra.get("nonfinite_in_a_row", 0)),
                         wall_s_before=float(extra.get("wall_s", 0.0)),
                         cost_usd_before=float(extra.get("cost_usd", 0.0)),
                         cost_excl_cold_usd_before=extra.get("cost_excl_cold_usd"),
                         slot_seq_base=state.round, slot_seq=slot_seq, slot_states=dict(slots), restore_slots=slots,
                         schedule_env_steps=schedule_horizon(state=state))


