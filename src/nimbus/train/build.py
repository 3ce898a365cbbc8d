"""``build(config)``: the one place where the whole system is connected. Read it top to bottom.

    config ─▶ Runtime (warm workers, ledger) ─▶ actor / learner FunctionSpecs
           ─▶ Store (weights, optimizer state) + StoreEvents
           ─▶ Buffer (algorithm's buffer spec) + replay strategy
           ─▶ actor-scaling controller (+ the Hessian probe it needs from the learner, train/probe.py)
           ─▶ Checkpointer, MetricsSink
    and the workflow binds triggers to actions over these parts (train/workflows.py).
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

from nimbus.algos.base import Algorithm, EnvSpaces
from nimbus.algos.registry import make_algorithm
from nimbus.config import FunctionConfig, NimbusConfig, dump_config
from nimbus.control.base import ActorScaler
from nimbus.control.config import make_scaler
from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import PricingModel, load_pricing
from nimbus.data.buffer import Buffer, BufferTooLarge
from nimbus.data.replay import FullBatch, ReplayStrategy
from nimbus.data.shm import run_prefix, sweep_orphans
from nimbus.data.store import Store
from nimbus.data.stores import STORE_HEADER, driver_store, store_descriptor, store_worker_env
from nimbus.data.triggers import StoreEvents
from nimbus.envs.make import make_env
from nimbus.errors import ConfigError
from nimbus.runtime.base import FunctionSpec, Resources, Runtime
from nimbus.runtime.factory import StampedRuntime, make_runtime
from nimbus.train.checkpoint import Checkpointer
from nimbus.train.metrics import MetricsSink
from nimbus.train.offpolicy_plan import make_replay, plan_for
from nimbus.train.probe import ProbeRequest, probe_request

log = logging.getLogger(__name__)
LEDGER_RECORDS_IN_MEMORY = 10_000  # a long run's driver stays flat (P13); costs are summed as records arrive
ACTOR_ENTRYPOINT = "nimbus.train.actor:actor_function"
LEARNER_ENTRYPOINT = "nimbus.train.learner:learner_function"
OFFPOLICY_ACTOR_ENTRYPOINT = "nimbus.train.offpolicy_actor:offpolicy_actor_function"      # train.workflow: async
OFFPOLICY_LEARNER_ENTRYPOINT = "nimbus.train.offpolicy_learner:offpolicy_learner_function"


@dataclass
class System:
    """Every connected part of one run. Workflows receive this and nothing global."""

    config: NimbusConfig
    run_dir: Path
    spaces: EnvSpaces
    algo: Algorithm
    runtime: Runtime
    ledger: Ledger
    pricing: PricingModel
    store: Store
    store_events: StoreEvents
    buffer: Buffer
    replay: ReplayStrategy
    scaler: ActorScaler
    actor_spec: FunctionSpec
    learner_spec: FunctionSpec
    checkpointer: Checkpointer
    metrics: MetricsSink
    probe: ProbeRequest | None = None   # the Hessian probe each learner request carries (Nitro), else None
    ship_batches: bool = False  # learner batches travel through the Store (ray: the buffer may be on another node)

    def close(self) -> None:
        """Stop workers, flush logs, remove every shared-memory segment of the run."""
        self.metrics.close()
        self.runtime.shutdown()
        self.buffer.close(unlink=True)
        self.store.close()


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


def function_spec(*, name: str, entrypoint: str, kind: str, function: FunctionConfig) -> FunctionSpec:
    return FunctionSpec(name=name, entrypoint=entrypoint, kind=kind,
                        resources=Resources(cpus=function.cpus, gpus=function.gpus, memory_mb=function.memory_mb),
                        timeout_s=function.timeout_s, max_retries=function.max_retries)


def probe_spaces(*, config: NimbusConfig) -> EnvSpaces:
    env: gym.Env = make_env(env_id=config.env.id, seed=config.seed, kwargs=config.env.kwargs)
    spaces = EnvSpaces(observation=env.observation_space, action=env.action_space)
    env.close()
    return spaces


def build(*, config: NimbusConfig, run_dir: Path) -> System:
    run_prefix()  # fix the run's shared-memory prefix before any worker starts
    swept = sweep_orphans()  # segments of drivers that died together with their janitor
    if swept:
        log.warning("removed %d shared-memory segments left by dead nimbus runs", swept)
    (run_dir / "config.yaml").write_text(dump_config(config=config))
    spaces = probe_spaces(config=config)
    algo = make_algorithm(config=config.algo)
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

    ledger = Ledger(path=run_dir / "ledger.jsonl", keep_in_memory=LEDGER_RECORDS_IN_MEMORY)  # the file has all
    try:  # the buffer before anything starts: a config it cannot fit is refused first (exit 2)
        backend = make_runtime(config=config, ledger=ledger, worker_env=store_worker_env(config=config.store))
    except BaseException:
        buffer.close(unlink=True)
        raise
    try:  # the store after the runtime: the ray store lives in the Ray instance the runtime joined
        store = driver_store(config=config.store, namespace=_run_namespace(run_dir=run_dir))
    except BaseException:
        backend.shutdown()
        buffer.close(unlink=True)
        raise
    runtime = StampedRuntime(inner=backend, headers={STORE_HEADER: store_descriptor(store)})  # functions open it
    actor_spec = function_spec(name="actor", entrypoint=OFFPOLICY_ACTOR_ENTRYPOINT if offpolicy else ACTOR_ENTRYPOINT,
                               kind="actor", function=config.actors.function)
    learner_spec = function_spec(name="learner", kind="learner", function=config.learner.function,
                                 entrypoint=OFFPOLICY_LEARNER_ENTRYPOINT if offpolicy else LEARNER_ENTRYPOINT)

    probe = probe_request(scaling=config.actors.scaling)   # what the scaler reads from each learner result

    return System(config=config, run_dir=run_dir, spaces=spaces, algo=algo, runtime=runtime, ledger=ledger,
                  pricing=load_pricing(path=Path(config.cost.pricing_path) if config.cost.pricing_path else None),
                  store=store, store_events=StoreEvents(), buffer=buffer, replay=replay,
                  scaler=scaler, actor_spec=actor_spec, learner_spec=learner_spec,
                  checkpointer=Checkpointer(directory=run_dir / "checkpoints", keep=config.train.keep_checkpoints),
                  metrics=MetricsSink(run_dir=run_dir, tensorboard=config.output.tensorboard,
                                      status_line=config.output.status_line),
                  probe=probe, ship_batches=config.runtime.backend == "ray")


def _create_buffer(*, spec: dict, capacity_rows: int, offpolicy: bool) -> Buffer:
    """The run's buffer, or a ConfigError naming the settings that sized it when shared memory cannot hold it."""
    try:
        return Buffer.create(spec=spec, capacity_rows=capacity_rows)
    except BufferTooLarge as exc:
        sized_by = "algo.buffer_capacity, or the actors and fragments kept in flight" if offpolicy else (
            "2 rounds of actors.scaling (peak actors) × env.num_envs_per_actor × actors.fragment_steps")
        raise ConfigError(f"{exc}: {capacity_rows:,} rows, sized by {sized_by}; lower them") from None


def peak_actors(*, config: NimbusConfig) -> int:
    """The most actor functions the configured scaler may launch in one round (pre-warmed before round 0:
    Nitro §8.1 provisions I_max so that a boosted round meets no cold start)."""
    return max(make_scaler(config=config.actors.scaling).initial().num_actors, _max_actors(config=config))


def _run_namespace(*, run_dir: Path) -> str:
    """This run's name in a shared store (Redis keys, the Ray store directory): run dir + driver pid."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{run_dir.name}-{os.getpid()}")


def _max_actors(*, config: NimbusConfig) -> int:
    scaling = config.actors.scaling
    return int(max(getattr(scaling, name, 1) for name in ("num_actors", "max_actors", "initial_actors")))
