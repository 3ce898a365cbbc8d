"""One policy's parts over the shared pool: its data (spaces, algorithm, scaler, buffer, replay) and its System.

The workflow class names what differs between workflows, so nothing here knows another technique:
``SystemWorkflow.functions(config=)`` the actor and learner functions it invokes (``PolicyFunctions``), and
``SystemWorkflow.buffer_plan(config=, guard_rows=)`` the replay it samples from (None: the whole round's batch,
``FullBatch``). The pool those parts run on (runtime, ledger, Store) is ``run/build.py``'s ``build_shared``.

It imports no technique folder either, since every workflow over one System builds on it: the scaler is found by
its ``actors.scaling.kind`` (policy/scaling.py), the probe block its learners receive is plain request data
(roles/probe.py), and functions are ``module:function`` names like every entrypoint, which each workflow gives.

Example::

    data = policy_data(config=config, replay_for=OffPolicyWorkflow.buffer_plan)   # exit 2 here, before any worker
    system = build_policy(config=config, shared=pool, run_dir=run_dir, policy="main", owns_shared=False,
                          functions=OffPolicyWorkflow.functions(config=config), data=data)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from nimbus.algos.base import Algorithm
from nimbus.algos.registry import make_algorithm
from nimbus.config import NimbusConfig
from nimbus.config.rules import peak_actors as configured_peak_actors
from nimbus.data.buffer import Buffer
from nimbus.data.checkpoint import Checkpointer
from nimbus.data.replay import FullBatch, ReplayStrategy
from nimbus.data.shm import SharedMemoryTooSmall
from nimbus.data.triggers import StoreEvents
from nimbus.envs.make import make_env
from nimbus.envs.snapshot import check_snapshot, require_snapshot
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError
from nimbus.policy.scaling import make_scaler
from nimbus.policy.system import System
from nimbus.report.metrics import MetricsSink
from nimbus.roles.probe import probe_request
from nimbus.roles.specs import check_devices, role_spec
from nimbus.schema.bounds import MAX_ACTORS
from nimbus.types import ActorScaler, Shared


@dataclass(frozen=True)
class PolicyFunctions:
    """The functions a workflow invokes for one policy: ``module:function`` entry points and the learner's role
    (its ``learner.*`` resources and its ledger name). Each workflow names its own (``SystemWorkflow.functions``):
    this layer sits below the technique folders and knows none of their functions."""

    actor_entrypoint: str
    learner_entrypoint: str
    learner_role: str = "learner"


@dataclass(frozen=True)
class BufferPlan:
    """A workflow's buffer: the rows it keeps and the replay strategy that samples them."""

    capacity_rows: int
    replay: ReplayStrategy


ReplayFor = Callable[..., "BufferPlan | None"]   # (*, config, guard_rows) -> BufferPlan, or None: the round's batch


@dataclass
class PolicyData:
    """One policy's data parts, made before anything starts: a buffer that shared memory cannot hold is a
    ConfigError (exit 2) before a worker, ledger or Store exists."""

    spaces: EnvSpaces
    algo: Algorithm
    scaler: ActorScaler
    buffer: Buffer
    replay: ReplayStrategy


def probe_spaces(*, config: NimbusConfig) -> EnvSpaces:
    """The env's observation and action spaces, read off one env made and closed here."""
    env = make_env(env_id=config.env.id, seed=config.seed, kwargs=config.env.kwargs,
                   imports=config.env.imports, wrappers=config.env.wrappers)
    spaces = EnvSpaces(observation=env.observation_space, action=env.action_space)
    env.close()
    return spaces


def check_snapshots(*, config: NimbusConfig) -> None:
    """``actors.restore_slots`` / ``train.exact_resume`` need an env a snapshot restores exactly (envs/snapshot.py):
    else exit 2 naming the env and the reason, before any worker starts."""
    key = "actors.restore_slots" if config.actors.restore_slots else "train.exact_resume"
    if config.actors.restore_slots or config.train.exact_resume:
        env = make_env(env_id=config.env.id, seed=config.seed, kwargs=config.env.kwargs, imports=config.env.imports,
                       wrappers=config.env.wrappers)
        try:
            require_snapshot(check=lambda: check_snapshot(env=env), env_id=config.env.id, key=key)
        finally:
            env.close()


def policy_data(*, config: NimbusConfig, replay_for: ReplayFor | None = None) -> PolicyData:
    """Spaces, algorithm (a user's ``algo.model`` checked here), actor-scaling controller, the replay
    ``replay_for`` plans (None: the round's batch, twice the peak round's rows) and the buffer they size."""
    check_devices(config=config)
    spaces = probe_spaces(config=config)
    check_snapshots(config=config)
    algo = make_algorithm(config=config.algo)
    if getattr(config.algo, "model", None) is not None:  # algo.model's contract, checked before any worker starts
        algo.make_model(spaces=spaces)
    torch.manual_seed(config.seed)
    scaler = make_scaler(config=config.actors.scaling)
    rows_per_actor = config.env.num_envs_per_actor * config.actors.fragment_steps
    max_actors = max(scaler.initial().num_actors, configured_peak_actors(scaling=config.actors.scaling))
    plan = replay_for(config=config, guard_rows=rows_per_actor * (max_actors + 1)) if replay_for else None
    if plan is None:
        plan = BufferPlan(capacity_rows=2 * rows_per_actor * max_actors, replay=FullBatch())
    buffer = _create_buffer(spec=algo.buffer_spec(spaces=spaces), capacity_rows=plan.capacity_rows,
                            sampled=not isinstance(plan.replay, FullBatch))
    return PolicyData(spaces=spaces, algo=algo, scaler=scaler, buffer=buffer, replay=plan.replay)


def build_policy(*, config: NimbusConfig, shared: Shared, run_dir: Path, policy: str, owns_shared: bool,
                 functions: PolicyFunctions, rank_base: int = 0, data: PolicyData | None = None) -> System:
    """One policy's parts over the shared pool: its data (``policy_data``, made here when None), the function
    specs ``functions`` names, the Hessian probe its scaler reads, checkpoints and metrics (in ``run_dir``)."""
    data = data or policy_data(config=config)
    actor_spec = role_spec(config=config, role="actor", entrypoint=functions.actor_entrypoint)
    learner_spec = role_spec(config=config, role=functions.learner_role, entrypoint=functions.learner_entrypoint)
    probe = probe_request(scaling=config.actors.scaling)   # what the scaler reads from each learner result
    return System(config=config, run_dir=run_dir, spaces=data.spaces, algo=data.algo, runtime=shared.runtime,
                  ledger=shared.ledger, pricing=shared.pricing,
                  store=shared.store, store_events=StoreEvents(), buffer=data.buffer, replay=data.replay,
                  scaler=data.scaler, actor_spec=actor_spec, learner_spec=learner_spec,
                  checkpointer=Checkpointer(directory=run_dir / "checkpoints", keep=config.train.keep_checkpoints),
                  metrics=MetricsSink(run_dir=run_dir, status_line=config.output.status_line),
                  probe=probe, ship_batches=config.runtime.backend == "ray", policy=policy, rank_base=rank_base,
                  owns_shared=owns_shared, shm_prefix=shared.shm_prefix if owns_shared else None)


def peak_actors(*, config: NimbusConfig) -> int:
    """The most actor functions the configured scaler may launch in one round (pre-warmed before round 0:
    Nitro §8.1 provisions I_max so that a boosted round meets no cold start)."""
    return max(make_scaler(config=config.actors.scaling).initial().num_actors,
               configured_peak_actors(scaling=config.actors.scaling))


def _create_buffer(*, spec: dict, capacity_rows: int, sampled: bool) -> Buffer:
    """The run's buffer, or a ConfigError naming the settings that sized it when shared memory cannot hold it."""
    try:
        return Buffer.create(spec=spec, capacity_rows=capacity_rows, max_actors=MAX_ACTORS)  # the bound config checks
    except SharedMemoryTooSmall as exc:
        sized_by = "algo.buffer_capacity, or the actors and fragments kept in flight" if sampled else (
            "2 rounds of actors.scaling (peak actors) × env.num_envs_per_actor × actors.fragment_steps")
        raise ConfigError(f"{exc}: {capacity_rows:,} rows, sized by {sized_by}; lower them") from None
