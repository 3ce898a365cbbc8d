"""``build(config)``: the one place where the whole system is connected. Read it top to bottom.

    config ─▶ Runtime (warm workers, ledger) ─▶ actor / learner FunctionSpecs
           ─▶ Store (weights, optimizer state) + StoreEvents
           ─▶ Buffer (algorithm's buffer spec) + replay strategy
           ─▶ actor-scaling controller (+ the Hessian probe it needs from the learner, nitro/probe.py)
           ─▶ Checkpointer, MetricsSink
    and the workflow binds triggers to actions over these parts (onpolicy/sync.py).
"""

from __future__ import annotations

import os
import re
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import torch

from nimbus.algos.base import Algorithm
from nimbus.algos.registry import make_algorithm
from nimbus.config import NimbusConfig, dump_config
from nimbus.config.bounds import MAX_ACTORS
from nimbus.config.rules import OFF_POLICY
from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import load_pricing
from nimbus.data.buffer import Buffer
from nimbus.data.checkpoint import Checkpointer
from nimbus.data.replay import FullBatch, ReplayStrategy
from nimbus.data.shm import SharedMemoryTooSmall, claim_run_prefix, release_run_prefix, sweep_orphans
from nimbus.data.stores import STORE_HEADER, driver_store, store_descriptor, store_worker_env
from nimbus.data.triggers import StoreEvents
from nimbus.envs.make import make_env
from nimbus.envs.snapshot import check_snapshot, require_snapshot
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError
from nimbus.nitro.scalers import make_scaler
from nimbus.nitro.probe import probe_request
from nimbus.offpolicy.plan import make_replay, plan_for
from nimbus.onpolicy.system import System
from nimbus.report.metrics import MetricsSink
from nimbus.roles.specs import role_spec
from nimbus.runtime.factory import StampedRuntime, make_runtime
from nimbus.types import ActorScaler, Shared

log = logging.getLogger(__name__)
LEDGER_RECORDS_IN_MEMORY = 10_000  # a long run's driver stays flat (P13); costs are summed as records arrive
ACTOR_ENTRYPOINT = "nimbus.onpolicy.actor:actor_function"
LEARNER_ENTRYPOINT = "nimbus.onpolicy.learner:learner_function"
OFFPOLICY_ACTOR_ENTRYPOINT = "nimbus.offpolicy.actor:offpolicy_actor_function"      # train.workflow: async
OFFPOLICY_LEARNER_ENTRYPOINT = "nimbus.offpolicy.learner:offpolicy_learner_function"
GRADIENT_LEARNER_ENTRYPOINT = "nimbus.stellaris.learner:gradient_learner_function"  # async_learners


def make_run_dir(*, config: NimbusConfig, root: Path | None = None) -> Path:
    base = Path(root or config.output.root_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = base / f"{config.name}-{stamp}"
    suffix = 1
    while run_dir.exists():
        run_dir = base / f"{config.name}-{stamp}-{suffix}"
        suffix += 1
    run_dir.mkdir(parents=True)
    return run_dir


def probe_spaces(*, config: NimbusConfig) -> EnvSpaces:
    env: gym.Env = make_env(env_id=config.env.id, seed=config.seed, kwargs=config.env.kwargs,
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


@dataclass
class PolicyData:
    """One policy's data parts, made before anything starts: a buffer that shared memory cannot hold is a
    ConfigError (exit 2) before a worker, ledger or Store exists."""

    spaces: EnvSpaces
    algo: Algorithm
    scaler: ActorScaler
    buffer: Buffer
    replay: ReplayStrategy


def build(*, config: NimbusConfig, run_dir: Path) -> System:
    """A one-policy run: the policy ``main``'s data, the shared parts, then the policy's functions (a
    population: pbt/population.py)."""
    shm_prefix = claim_run_prefix()  # this run's own, before any segment or worker exists (workers inherit it)
    try:
        data = policy_data(config=config)
    except BaseException:
        release_run_prefix(prefix=shm_prefix)
        raise
    try:
        shared = build_shared(config=config, run_dir=run_dir, shm_prefix=shm_prefix)
    except BaseException:
        data.buffer.close(unlink=True)
        release_run_prefix(prefix=shm_prefix)
        raise
    return build_policy(config=config, shared=shared, run_dir=run_dir, policy="main", owns_shared=True, data=data)


def build_shared(*, config: NimbusConfig, run_dir: Path, shm_prefix: str | None = None) -> Shared:
    """The pool of workers, the ledger, the Store and pricing; ``shm_prefix``: the run's claimed prefix (claimed
    here when None)."""
    check_devices(config=config)   # before any worker (the multi-agent run builds no PolicyData)
    shm_prefix = shm_prefix or claim_run_prefix()
    swept = sweep_orphans()  # segments of drivers that died together with their janitor
    if swept:
        log.warning("removed %d shared-memory segments left by dead nimbus runs", swept)
    (run_dir / "config.yaml").write_text(dump_config(config=config))
    ledger = Ledger(path=run_dir / "ledger.jsonl", keep_in_memory=LEDGER_RECORDS_IN_MEMORY)  # the file has all
    backend = make_runtime(config=config, ledger=ledger, worker_env=store_worker_env(config=config.store))
    try:  # the store after the runtime: the ray store lives in the Ray instance the runtime joined
        store = driver_store(config=config.store, namespace=run_namespace(run_dir=run_dir))
    except BaseException:
        backend.shutdown()
        raise
    runtime = StampedRuntime(inner=backend, headers={STORE_HEADER: store_descriptor(store)})  # functions open it
    pricing = load_pricing(path=Path(config.cost.pricing_path) if config.cost.pricing_path else None)
    return Shared(runtime=runtime, ledger=ledger, store=store, pricing=pricing, shm_prefix=shm_prefix,
                  release_prefix=release_run_prefix)


def check_devices(*, config: NimbusConfig) -> None:
    """Exit 2 before anything starts for devices this machine lacks: ``learner.device: cuda`` or
    ``devices.kind: cuda`` with no CUDA device visible to torch, where the functions run here (local
    runtime, or a private Ray; a Ray cluster's learners may sit on other nodes' GPUs). With a device pool
    (``devices.pool: on_demand``) learner-side functions compute on their lease's device, so ``learner.device``
    is not checked then (runtime/devices.py)."""
    here = config.runtime.backend == "local" or config.runtime.address == "local"
    if not here or torch.cuda.is_available():
        return
    if config.learner.device == "cuda" and config.devices.pool != "on_demand":   # a pool's lease decides instead
        raise ConfigError("learner.device: cuda, but torch sees no CUDA device on this machine (use auto or cpu)")
    if config.devices.pool == "on_demand" and config.devices.kind == "cuda":
        raise ConfigError("devices.kind: cuda, but torch sees no CUDA device on this machine (use auto or cpu)")


def policy_data(*, config: NimbusConfig) -> PolicyData:
    """Spaces, algorithm (a user's ``algo.model`` checked here), actor-scaling controller, replay strategy and
    the buffer they size."""
    check_devices(config=config)
    spaces = probe_spaces(config=config)
    check_snapshots(config=config)
    algo = make_algorithm(config=config.algo)
    if getattr(config.algo, "model", None) is not None:  # algo.model's contract, checked before any worker starts
        algo.make_model(spaces=spaces)
    torch.manual_seed(config.seed)
    offpolicy = config.train.workflow == "async"  # off-policy functions, replay and buffer size (offpolicy_plan.py)
    scaler = make_scaler(config=config.actors.scaling)
    rows_per_actor = config.env.num_envs_per_actor * config.actors.fragment_steps
    max_actors = max(scaler.initial().num_actors, _max_actors(config=config))
    capacity_rows, replay = 2 * rows_per_actor * max_actors, FullBatch()
    if offpolicy:  # replay capacity, and Uniform / Prioritized / NStep / FIFO per the algorithm's config
        plan = plan_for(config=config)
        capacity_rows = plan.capacity_rows
        replay = make_replay(plan=plan, seed=config.seed, guard_rows=rows_per_actor * (max_actors + 1))
    buffer = _create_buffer(spec=algo.buffer_spec(spaces=spaces), capacity_rows=capacity_rows, offpolicy=offpolicy)
    return PolicyData(spaces=spaces, algo=algo, scaler=scaler, buffer=buffer, replay=replay)


def build_policy(*, config: NimbusConfig, shared: Shared, run_dir: Path, policy: str, owns_shared: bool,
                 rank_base: int = 0, data: PolicyData | None = None) -> System:
    """One policy's parts over the shared pool: its data (``policy_data``, made here when None), function specs
    by role, the Hessian probe its scaler reads, checkpoints and metrics (in ``run_dir``)."""
    data = data or policy_data(config=config)
    offpolicy = config.train.workflow == "async"
    transitions = config.algo.name in OFF_POLICY   # rows (s, a, r, s'), no values: also IMPACT under async_learners
    actor_spec = role_spec(config=config, role="actor",
                           entrypoint=OFFPOLICY_ACTOR_ENTRYPOINT if transitions else ACTOR_ENTRYPOINT)
    learner_spec = role_spec(config=config, role="learner",
                             entrypoint=OFFPOLICY_LEARNER_ENTRYPOINT if offpolicy else LEARNER_ENTRYPOINT)
    if config.train.workflow == "async_learners":   # Stellaris: learner functions compute gradients
        learner_spec = role_spec(config=config, role="gradient_learner", entrypoint=GRADIENT_LEARNER_ENTRYPOINT)
    probe = probe_request(scaling=config.actors.scaling)   # what the scaler reads from each learner result
    return System(config=config, run_dir=run_dir, spaces=data.spaces, algo=data.algo, runtime=shared.runtime,
                  ledger=shared.ledger, pricing=shared.pricing,
                  store=shared.store, store_events=StoreEvents(), buffer=data.buffer, replay=data.replay,
                  scaler=data.scaler, actor_spec=actor_spec, learner_spec=learner_spec,
                  checkpointer=Checkpointer(directory=run_dir / "checkpoints", keep=config.train.keep_checkpoints),
                  metrics=MetricsSink(run_dir=run_dir, status_line=config.output.status_line),
                  probe=probe, ship_batches=config.runtime.backend == "ray", policy=policy, rank_base=rank_base,
                  owns_shared=owns_shared, shm_prefix=shared.shm_prefix if owns_shared else None)


def _create_buffer(*, spec: dict, capacity_rows: int, offpolicy: bool) -> Buffer:
    """The run's buffer, or a ConfigError naming the settings that sized it when shared memory cannot hold it."""
    try:
        return Buffer.create(spec=spec, capacity_rows=capacity_rows, max_actors=MAX_ACTORS)  # the bound config checks
    except SharedMemoryTooSmall as exc:
        sized_by = "algo.buffer_capacity, or the actors and fragments kept in flight" if offpolicy else (
            "2 rounds of actors.scaling (peak actors) × env.num_envs_per_actor × actors.fragment_steps")
        raise ConfigError(f"{exc}: {capacity_rows:,} rows, sized by {sized_by}; lower them") from None


def peak_actors(*, config: NimbusConfig) -> int:
    """The most actor functions the configured scaler may launch in one round (pre-warmed before round 0:
    Nitro §8.1 provisions I_max so that a boosted round meets no cold start)."""
    return max(make_scaler(config=config.actors.scaling).initial().num_actors, _max_actors(config=config))


def run_namespace(*, run_dir: Path) -> str:
    """This run's name in a shared store (Redis keys, the Ray store directory): run dir + driver pid."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{run_dir.name}-{os.getpid()}")


def _max_actors(*, config: NimbusConfig) -> int:
    scaling = config.actors.scaling
    return int(max(getattr(scaling, name, 1) for name in ("num_actors", "max_actors", "initial_actors")))
