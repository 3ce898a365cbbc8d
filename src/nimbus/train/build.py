"""``build(config)``: the one place where the whole system is connected. Read it top to bottom.

    config ─▶ Runtime (warm workers, ledger) ─▶ actor / learner FunctionSpecs
           ─▶ Store (weights, optimizer state) + StoreEvents
           ─▶ Buffer (algorithm's buffer spec) + replay strategy
           ─▶ actor-scaling controller
           ─▶ Checkpointer, MetricsSink
    and the workflow binds triggers to actions over these parts (train/workflows.py).
"""

from __future__ import annotations

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
from nimbus.data.buffer import Buffer
from nimbus.data.replay import FullBatch, ReplayStrategy
from nimbus.data.shm import run_prefix
from nimbus.data.store import ShmStore, Store
from nimbus.data.triggers import StoreEvents
from nimbus.envs.make import make_env
from nimbus.runtime.base import FunctionSpec, Resources, Runtime
from nimbus.runtime.local import LocalRuntime
from nimbus.train.checkpoint import Checkpointer
from nimbus.train.metrics import MetricsSink

ACTOR_ENTRYPOINT = "nimbus.train.actor:actor_function"
LEARNER_ENTRYPOINT = "nimbus.train.learner:learner_function"


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
    (run_dir / "config.yaml").write_text(dump_config(config=config))
    spaces = probe_spaces(config=config)
    algo = make_algorithm(config=config.algo)
    torch.manual_seed(config.seed)

    ledger = Ledger(path=run_dir / "ledger.jsonl")
    runtime = LocalRuntime(ledger=ledger, capacity_cpus=config.runtime.capacity_cpus,
                           max_workers=config.runtime.max_workers, keep_alive_s=config.runtime.keep_alive_s,
                           inline_max_bytes=config.channel.inline_max_bytes,
                           compress_min_bytes=config.channel.compress_min_bytes)
    actor_spec = function_spec(name="actor", entrypoint=ACTOR_ENTRYPOINT, kind="actor",
                               function=config.actors.function)
    learner_spec = function_spec(name="learner", entrypoint=LEARNER_ENTRYPOINT, kind="learner",
                                 function=config.learner.function)

    scaler = make_scaler(config=config.actors.scaling)
    rows_per_actor = config.env.num_envs_per_actor * config.actors.fragment_steps
    max_actors = max(scaler.initial().num_actors, _max_actors(config=config))
    buffer = Buffer.create(spec=algo.buffer_spec(spaces=spaces), capacity_rows=2 * rows_per_actor * max_actors)

    return System(config=config, run_dir=run_dir, spaces=spaces, algo=algo, runtime=runtime, ledger=ledger,
                  pricing=load_pricing(path=Path(config.cost.pricing_path) if config.cost.pricing_path else None),
                  store=ShmStore(owner=True), store_events=StoreEvents(), buffer=buffer, replay=FullBatch(),
                  scaler=scaler, actor_spec=actor_spec, learner_spec=learner_spec,
                  checkpointer=Checkpointer(directory=run_dir / "checkpoints", keep=config.train.keep_checkpoints),
                  metrics=MetricsSink(run_dir=run_dir, tensorboard=config.output.tensorboard,
                                      status_line=config.output.status_line))


def _max_actors(*, config: NimbusConfig) -> int:
    scaling = config.actors.scaling
    return int(max(getattr(scaling, name, 1) for name in ("num_actors", "max_actors", "initial_actors")))
