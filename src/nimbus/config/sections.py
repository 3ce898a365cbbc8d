"""The run config's sections: one frozen model per top-level key but the algorithm and the techniques'.

Every section is a frozen pydantic model with ``extra="forbid"``, so an unknown or misspelled key is
rejected before anything starts; a sub-section given in part keeps its section's defaults (``Section``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, SecretStr, model_validator
from pydantic_core import PydanticUndefined

from nimbus.config.renamed import workflow_value
from nimbus.config.trackers import Logger, MlflowConfig, WandbConfig, check_loggers
from nimbus.nitro.config import FixedScalingConfig, ScalingConfig
from nimbus.schema.base import ConfigSection
from nimbus.schema.bounds import MAX_ACTORS, MAX_INLINE_BYTES, MAX_RETRIES


def _default_scaling() -> ScalingConfig:
    return FixedScalingConfig(kind="fixed", num_actors=2)


class Section(ConfigSection):

    @model_validator(mode="before")
    @classmethod
    def _keep_section_defaults(cls, data: Any) -> Any:
        """A sub-section given in part keeps its *section's* defaults for the keys not given.

        ``learner.function`` defaults to 600 s, 4096 MB and 0.25 GPU, not FunctionConfig's 120 s, 1024 MB
        and 0; without this, ``learner: {function: {cpus: 2}}`` (or ``--set learner.function.cpus=2``)
        would silently fall back to the class's values for the rest. Only for a sub-section of one model
        type whose default is built by a factory; a union (``actors.scaling``) takes the member the
        ``kind`` names, whole."""
        if not isinstance(data, dict):
            return data
        filled = dict(data)
        for name, field in cls.model_fields.items():
            given = data.get(name)
            if isinstance(given, dict) and _is_model(field.annotation) and field.default_factory is not None:
                filled[name] = {**_changed_defaults(field.default_factory()), **given}
        return filled


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _changed_defaults(instance: BaseModel) -> dict[str, Any]:
    """The keys where ``instance`` differs from its class's own defaults (and any required key)."""
    changed: dict[str, Any] = {}
    for name, field in type(instance).model_fields.items():
        required = field.default is PydanticUndefined and field.default_factory is None
        value = getattr(instance, name)
        if required or value != (field.default_factory() if field.default_factory is not None else field.default):
            changed[name] = value
    return changed


class EnvConfig(Section):
    id: str = "CartPole-v1"
    """gymnasium id (``nimbus envs`` lists the tested ones; any registered id works), or ``module:EnvId``;
    ``nimbus/*`` ids are fault-injection envs for tests."""
    num_envs_per_actor: int = Field(default=4, ge=1)
    """envs stepped in lock-step by one actor function (batched policy inference)"""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """keyword arguments for ``gymnasium.make``"""
    imports: tuple[str, ...] = ()
    """modules imported (in the driver and every worker) before the env is made: they register your env ids"""
    wrappers: tuple[str, ...] = ()
    """gymnasium wrappers applied in order, e.g. gymnasium.wrappers.FlattenObservation for a Dict observation"""


class FunctionConfig(Section):
    """Resources and limits of one function kind (billed by the pricing model)."""

    cpus: float = Field(default=1.0, gt=0)
    """CPUs one invocation occupies (scheduling and torch threads)"""
    gpus: float = Field(default=0.0, ge=0)
    """GPU share; > 0 is billed as that share of a p3.2xlarge"""
    memory_mb: int = Field(default=1024, ge=128)
    """memory size; CPU functions are billed per GB-second like AWS Lambda"""
    timeout_s: float = Field(default=120.0, gt=0)
    """hard limit per attempt; the worker is killed and the attempt billed in full"""
    max_retries: int = Field(default=3, ge=0, le=MAX_RETRIES)
    """retries of a failed, crashed or timed-out attempt (on another worker); at most 100 (schema/bounds.py)"""
    retry_exceptions: int = Field(default=0, ge=0, le=MAX_RETRIES)
    """of those retries, how many may follow an exception raised by the function's own code (env, model, loss);
    0 (Ray's retry_exceptions=False): the run stops at the first, with its traceback (docs/cluster.md)"""
    heartbeat_s: float | None = Field(default=5.0, gt=0)
    """liveness (local): env and optimizer steps beat; silent for 3x this = stalled: killed, retried; null: off"""


class ActorsConfig(Section):
    scaling: ScalingConfig = Field(default_factory=lambda: _default_scaling())
    """actor-scaling controller: fixed, nitro, hydrozoa or max"""
    fragment_steps: int = Field(default=128, ge=1, description="env steps per env per actor invocation")
    function: FunctionConfig = Field(default_factory=FunctionConfig)
    restore_slots: bool = False
    """results carry the rank's env slot; a worker lacking it (reclaimed, new, retry) restores it: episodes go on"""
    preregister: int = Field(default=0, ge=0, le=MAX_ACTORS)
    """local only: actor workers started before round 0, then stopped (SIGSTOP) until scaling up wakes them"""
    env_backend: Literal["gymnasium", "vector", "envpool", "auto"] = "gymnasium"
    """how an on-policy actor steps its envs: gymnasium (one by one), vector (gymnasium's SyncVectorEnv), envpool
    (C++, the envpool extra), auto (envpool where it has the env and nothing needs gymnasium's envs)"""


def _yaml_off(value: Any) -> Any:
    """YAML reads an unquoted ``off`` as false: take it as the mode "off"."""
    return "off" if value is False else value


class LearnerConfig(Section):
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """learner device; auto = cuda when present"""
    torch_threads: int = Field(default=1, ge=1)
    """torch intra-op threads in the learner function (set on every invocation; at most function.cpus)"""
    compile: Annotated[Literal["off", "compile", "graphs"], BeforeValidator(_yaml_off)] = "off"
    """PPO's minibatch forward and loss: eager (off), torch.compile (compile), or compiled with CUDA graphs
    (graphs: compile's reduce-overhead; on a CPU the same as compile); onpolicy PPO only, no pipelines. The optimizer
    step stays eager (fused on CUDA). Compiled once per warm worker (docs/benchmarks.md has its first-call cost)"""
    function: FunctionConfig = Field(
        default_factory=lambda: FunctionConfig(cpus=1.0, gpus=0.25, memory_mb=4096, timeout_s=600.0))


ROLES = ("actor", "learner", "gradient_learner", "parameter", "critic", "postprocess")
"""Function roles a workflow may invoke, each with its own resources, timeout and retries."""


def _learner_like() -> FunctionConfig:
    return FunctionConfig(cpus=1.0, gpus=0.25, memory_mb=4096, timeout_s=600.0)


class FunctionsConfig(Section):
    """Resources, timeout and retries per function role (``functions.<role>``); the ledger names the role."""

    actor: FunctionConfig | None = Field(default=None, json_schema_extra={"inherits": "actors.function"})
    """actor functions (default: actors.function; each key not given here takes actors.function's value)"""
    learner: FunctionConfig | None = Field(default=None, json_schema_extra={"inherits": "learner.function"})
    """learner functions that update weights (default: learner.function; each key not given here takes
    learner.function's value, e.g. 4096 MB, 600 s and 0.25 GPU)"""
    gradient_learner: FunctionConfig = Field(default_factory=_learner_like)
    """learner functions that return gradients, not weights (Stellaris)"""
    parameter: FunctionConfig = Field(default_factory=lambda: FunctionConfig(memory_mb=2048))
    """the parameter function that aggregates gradients and publishes weights (Stellaris)"""
    critic: FunctionConfig = Field(default_factory=_learner_like)
    """critic functions of actor-critic multi-agent methods (MARLess)"""
    postprocess: FunctionConfig = Field(default_factory=lambda: FunctionConfig(memory_mb=2048))
    """post-processing functions that build centralised inputs (MARLess)"""


class RuntimeConfig(Section):
    backend: Literal["local", "ray", "inline", "simulated"] = "local"
    """where functions run: local worker processes, Ray actors (ray: see docs/cluster.md), inline: in the driver,
    one call at a time, for tests (no timeouts enforced, no heartbeats, no parallelism; runtime/inline.py), or
    simulated: in the driver on a virtual clock, durations from the simulation section (docs/simulated.md)"""
    address: str = "local"
    """ray only: local (a private, loopback-only Ray), auto (the cluster `ray start` made here), or host:port"""
    init_timeout_s: float = Field(default=120.0, gt=0)
    """a new worker must have imported its function within this (else it is killed and retried)"""
    capacity_cpus: float | None = Field(default=None, gt=0)
    """CPUs busy at once (default: all cores); idle warm workers do not count"""
    max_workers: int | None = Field(default=None, ge=1)
    """worker processes kept, busy or warm (default 2 x capacity; a population or several workloads: at least every
    member's or workload's peak actors + 1 learner)"""
    keep_alive_s: float = Field(default=600.0, gt=0)
    """idle warm workers are reclaimed after this (OpenWhisk default)"""
    prewarm: bool = True
    """start actor and learner workers before round 0"""
    allow_insecure: bool = False
    """ray only: accept a non-loopback runtime.address while RAY_AUTH_MODE is not token (docs/cluster.md)"""
    share_weight: float = Field(default=1.0, gt=0)
    """this workload's weight when several share one pool (``nimbus train a.yaml b.yaml``; fair share)"""
    start_method: Literal["fork_server", "spawn"] = "fork_server"
    """local only: fork workers from a template that imported torch/gymnasium (ms), or spawn each (s)"""


class StoreConfig(Section):
    backend: Literal["shm", "redis", "ray"] = "shm"
    """where weights and gradients live: shm (this machine), redis (a Redis server), ray (Ray's object store)"""
    keep_versions: int = Field(default=2, ge=1)
    """policy versions kept in the store"""
    url: str = "redis://127.0.0.1:6379/0"
    """redis only: redis://[user@]host:port/db (rediss:// for TLS); put the password in store.password(_env)"""
    username: str | None = None
    """redis only: ACL user (default: the default user)"""
    password: SecretStr | None = None
    """redis only: the ACL password (never logged, saved as ****); prefer password_env"""
    password_env: str | None = None
    """redis only: name of an environment variable holding the password"""
    fallback: Literal["none", "shm"] = "none"
    """redis only: if Redis is unreachable at start, use shm (one machine) instead of failing"""
    max_retries: int = Field(default=3, ge=0, le=MAX_RETRIES)
    """redis only: retries of a failed connection or command, with exponential back-off and jitter (at most 100)"""
    backoff_base_s: float = Field(default=0.05, gt=0)
    """redis only: first back-off delay"""
    backoff_cap_s: float = Field(default=1.0, gt=0)
    """redis only: longest back-off delay"""
    timeout_s: float = Field(default=5.0, gt=0)
    """redis only: socket connect and command timeout"""
    full_wait_s: float = Field(default=10.0, ge=0)
    """redis only: how long a write waits for room when Redis is full (noeviction) before the run stops"""
    lease_s: float = Field(default=60.0, gt=0)
    """redis only: the run's keys expire this long after the driver last renewed them (a killed driver's too)"""
    allow_insecure: bool = False
    """redis only: accept a non-loopback redis:// URL with neither a password nor TLS (docs/cluster.md)"""


class ChannelConfig(Section):
    inline_max_bytes: int = Field(default=64 * 1024, ge=0, le=MAX_INLINE_BYTES)
    """bodies up to this size travel inside the header frame instead of shared memory (at most 32 MiB)"""
    compress_min_bytes: int | None = Field(default=1 << 20, ge=0)
    """LZ4-compress bodies of at least this size (null: never)"""


class PipelineConfig(Section):
    """ARTOS's on-policy pipelines and Stellaris's loader (onpolicy/pipeline.py, docs/dataplane.md); PPO, onpolicy."""

    minibatch: bool = False
    """mini-batch pipeline: the learner starts at the first actor's rows; epoch 1 steps as blocks arrive"""
    dual_stage: bool = False
    """dual-stage pipeline: GAE keys (rewards, values, V(s'), flags) first, GAE while obs/actions follow"""
    loader: bool = False
    """device data loader: a background thread stages the next minibatch while the current one trains"""


class TrainConfig(Section):
    workflow: Annotated[Literal["onpolicy", "offpolicy", "stellaris", "marless"],
                        BeforeValidator(workflow_value)] = "onpolicy"
    """onpolicy: on-policy rounds (actors, then learner); offpolicy: off-policy DQN/SAC/IMPALA, see offpolicy;
    stellaris: Stellaris's asynchronous learner functions (PPO or IMPACT), see stellaris; marless: MARLess
    (IPPO, MAPPO, IQL, VDN on PettingZoo Parallel envs), see marless. The old names sync, async, async_learners and
    multiagent are still read, with a warning (config/renamed.py)"""
    total_env_steps: int = Field(default=100_000, ge=1)
    """stop after this many env steps"""
    max_rounds: int | None = Field(default=None, ge=1)
    """stop after this many rounds"""
    target_return: float | None = None
    """stop when the moving mean return reaches this"""
    return_window: int = Field(default=100, ge=1, description="episodes in the moving mean return")
    checkpoint_every_rounds: int = Field(default=25, ge=1)
    """checkpoint period (a final checkpoint is always written)"""
    keep_checkpoints: int = Field(default=3, ge=1)
    """checkpoints kept on disk"""
    eval_episodes: int = Field(default=10, ge=0)
    """episodes of the final policy evaluated at the end (0: skip), and of each periodic evaluation"""
    eval_every_env_steps: int | None = Field(default=None, ge=1)
    """also evaluate the newest policy every this many env steps, in the driver (metrics eval/*; None: only at the end);
    a population: each member every this many of its own env steps"""
    eval_explore: bool = True
    """evaluation episodes act as in training (sampled actions; DQN's ε); false: greedily (the distribution's mode)"""
    target_eval_return: float | None = None
    """stop when a periodic evaluation's mean return reaches this (needs eval_every_env_steps)"""
    max_nonfinite_losses: int = Field(default=5, ge=1)
    """stop after this many non-finite updates in a row (each is skipped)"""
    checkpoint_replay: bool = False
    """checkpoints also keep the replay buffer and the scaler's window (a safetensors file beside each), or IQL's and
    VDN's replay of the last rounds; --resume restores them"""
    exact_resume: bool = False
    """checkpoints also hold every actor's envs mid-episode, so --resume continues bitwise (onpolicy workflow;
    MuJoCo and classic-control envs)"""
    overlap: bool = False
    """onpolicy workflow: the next round's actors sample with the current weights while the learner trains (one version
    of lag; PPO weighs each row by the policy that sampled it): actors and learner never wait for each other"""


class CostConfig(Section):
    pricing_path: str | None = None
    """YAML pricing model overriding the shipped nimbus/cost/pricing.yaml"""


class OutputConfig(Section):
    root_dir: str = "runs"
    """runs are written to <root_dir>/<name>-<timestamp>/"""
    loggers: tuple[Logger, ...] = ("tensorboard",)
    """experiment trackers each round's scalars go to: tensorboard, wandb, mlflow ([] for none; docs/tracking.md)"""
    report: bool = True
    """render report.png at the end"""
    status_line: bool = True
    """live status line on stderr"""
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    """Weights & Biases settings, used when loggers names wandb"""
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig)
    """MLflow settings, used when loggers names mlflow"""

    @model_validator(mode="before")
    @classmethod
    def _replaced_tensorboard(cls, data: Any) -> Any:
        """``output.tensorboard`` (once a bool; an old config.yaml may still have it) became ``output.loggers``: say
        how to write it."""
        if isinstance(data, dict) and "tensorboard" in data:
            raise ValueError("output.tensorboard was replaced by output.loggers: write `loggers: [tensorboard]` "
                             "for TensorBoard, `loggers: []` for none (a resumed run's config.yaml too)")
        return data

    @model_validator(mode="after")
    def _check_loggers(self) -> OutputConfig:
        check_loggers(loggers=self.loggers)
        return self


