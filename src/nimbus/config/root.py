"""The whole run config: ``NimbusConfig``, its sections and the checks that span several of them.

Each component receives only its own section; the resolved config is saved with the run as ``config.yaml``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, model_validator

from nimbus.config.algo import AlgoSection
from nimbus.config.devices import DevicesConfig, PrewarmConfig
from nimbus.config.renamed import renamed_config
from nimbus.config.rules import check_cluster, check_evaluation, check_pipeline, check_workflow, peak_actors
from nimbus.config.sections import (
    ROLES,
    ActorsConfig,
    ChannelConfig,
    CostConfig,
    EnvConfig,
    FunctionConfig,
    FunctionsConfig,
    LearnerConfig,
    OutputConfig,
    PipelineConfig,
    RuntimeConfig,
    Section,
    StoreConfig,
    TrainConfig,
)
from nimbus.config.simulation import SimulationConfig, check_simulated
from nimbus.marless.config import MarlessConfig
from nimbus.offpolicy.config import OffPolicyConfig
from nimbus.pbt.config import PBTConfig, PolicyConfig, check_population
from nimbus.schema.bounds import MAX_SEED, RANK_STRIDE
from nimbus.stellaris.config import StellarisConfig


class NimbusConfig(Section):
    name: str = Field(default="run", pattern=r"^[A-Za-z0-9_.-]+$")
    """run name, the prefix of the run directory"""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """seeds envs, policy sampling and minibatch order (same seed: same run, on CPU in the onpolicy workflow); 32-bit"""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """the environment every actor builds"""
    algo: AlgoSection
    """the algorithm and its hyperparameters; ``name`` picks the member"""
    actors: ActorsConfig = Field(default_factory=ActorsConfig)
    """the actor functions: how many (``scaling``), how much each collects, their resources"""
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    """the learner function: device, threads, resources"""
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    """where functions run: local worker processes or a Ray cluster, warm pool and retries"""
    store: StoreConfig = Field(default_factory=StoreConfig)
    """where weights and batches live between functions: shared memory, Redis or Ray's object store"""
    channel: ChannelConfig = Field(default_factory=ChannelConfig)
    """how messages between the driver and its local workers are framed: inline size, LZ4 threshold"""
    train: TrainConfig = Field(default_factory=TrainConfig)
    """the run: workflow, length, evaluation, checkpoints, resume"""
    cost: CostConfig = Field(default_factory=CostConfig)
    """the prices each function invocation is billed at"""
    output: OutputConfig = Field(default_factory=OutputConfig)
    """the run directory, experiment trackers (loggers: TensorBoard, W&B, MLflow), report and status line"""
    offpolicy: OffPolicyConfig = Field(default_factory=OffPolicyConfig)
    """triggers, weight sync and back-pressure of ``train.workflow: offpolicy`` (ignored otherwise); the old key
    async_workflow is still read, with a warning"""
    stellaris: StellarisConfig = Field(default_factory=StellarisConfig)
    """Stellaris's asynchronous learners, staleness-aware aggregation and IS truncation (docs/stellaris.md)"""
    marless: MarlessConfig = Field(default_factory=MarlessConfig)
    """MARLess learner sharing and actor scaling (``train.workflow: marless``; docs/marless.md)"""
    devices: DevicesConfig = Field(default_factory=DevicesConfig)
    """ARTOS's on-demand device pool for learner-side functions (config/devices.py)"""
    prewarm: PrewarmConfig = Field(default_factory=PrewarmConfig)
    """ARTOS's workload monitor: pre-warm actors during the learner's update (config/devices.py)"""
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    """ARTOS's pipelines and Stellaris's loader for onpolicy PPO, off by default (onpolicy/pipeline.py,
    docs/dataplane.md)"""
    simulation: SimulationConfig = Field(default_factory=SimulationConfig)
    """simulated durations, cold starts, stragglers and failures of ``runtime.backend: simulated``
    (docs/simulated.md)"""
    functions: FunctionsConfig = Field(default_factory=FunctionsConfig)
    """resources, timeout and retries per function role"""
    policies: list[PolicyConfig] = Field(default_factory=list)
    """several named policies in one run (empty: one policy, main); see pbt/population.py"""
    pbt: PBTConfig | None = None
    """population-based training over generated members (docs/pbt.md)"""

    def role_function(self, *, role: str) -> FunctionConfig:
        """The resources of one function role (``functions.<role>``; actor and learner default to their sections)."""
        if role not in ROLES:
            raise KeyError(f"unknown function role {role!r} (roles: {', '.join(ROLES)})")
        configured = getattr(self.functions, role)
        if configured is not None:
            return configured
        return self.actors.function if role == "actor" else self.learner.function

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        """A config written before the workflows took their folders' names reads as the same config with the new
        names (config/renamed.py)."""
        return renamed_config(data=data)

    @model_validator(mode="before")
    @classmethod
    def _role_functions_inherit(cls, data: Any) -> Any:
        """``functions.actor`` / ``functions.learner`` given in part take ``actors.function``'s /
        ``learner.function``'s values for the keys not given, so ``--set functions.learner.cpus=2`` keeps the
        learner's 4096 MB, 600 s and 0.25 GPU instead of FunctionConfig's class defaults."""
        if not isinstance(data, dict) or not isinstance(data.get("functions"), dict):
            return data
        functions = dict(data["functions"])
        for role, section, section_type in (("actor", "actors", ActorsConfig), ("learner", "learner", LearnerConfig)):
            if isinstance(functions.get(role), dict):
                try:
                    inherited = section_type.model_validate(data.get(section, {})).function
                except ValidationError:
                    return data   # the section's own error is reported, with its key path, by the validation
                functions[role] = {**inherited.model_dump(), **functions[role]}
        return {**data, "functions": functions}

    @model_validator(mode="after")
    def _check_population(self) -> NimbusConfig:
        check_population(algo=self.algo, policies=self.policies, pbt=self.pbt, workflow=self.train.workflow,
                         pipelined=self.pipeline.minibatch or self.pipeline.dual_stage,
                         exact_resume=self.train.exact_resume)
        if (self.policies or self.pbt is not None) and (peak := peak_actors(scaling=self.actors.scaling)) > RANK_STRIDE:
            raise ValueError(f"actors.scaling: {peak} actors per member exceed {RANK_STRIDE}, the actor ranks each "
                             "member of policies / pbt owns (schema/bounds.py RANK_STRIDE)")
        return self

    @model_validator(mode="after")
    def _check_rules(self) -> NimbusConfig:
        """The whole-config rules of config/rules.py, in this order (the first broken one is reported)."""
        check_pipeline(config=self)
        check_workflow(config=self)
        check_evaluation(config=self)
        return self

    @model_validator(mode="after")
    def _check_cluster(self) -> NimbusConfig:
        check_cluster(runtime=self.runtime, store=self.store)
        check_simulated(config=self)
        if self.actors.preregister and self.runtime.backend != "local":
            raise ValueError("actors.preregister needs runtime.backend: local (Ray actors cannot be stopped)")
        return self

    @model_validator(mode="after")
    def _check_batch(self) -> NimbusConfig:
        minibatch = getattr(self.algo, "minibatch_size", None)
        rows = self.env.num_envs_per_actor * self.actors.fragment_steps
        if minibatch is not None and minibatch > rows * _min_actors(self.actors.scaling):
            raise ValueError(f"algo.minibatch_size ({minibatch}) exceeds the rows of one round "
                             f"({rows} per actor × {_min_actors(self.actors.scaling)} actors)")
        return self


def _min_actors(scaling: Any) -> int:
    for name in ("num_actors", "min_actors", "initial_actors", "max_actors"):
        if hasattr(scaling, name):
            return int(getattr(scaling, name))
    return 1

