"""The config's cross-section rules, as data checks: ``NimbusConfig`` runs them at load time.

They read only config values (no runtime, workflow or function code), so ``config.py`` stays the
lowest layer: a rule that names a workflow's, the pipelines' or a backend's constraints lives here,
and the module it describes imports it from here.

* ``check_workflow``: which algorithms run in which workflow, and the async workflow's limits;
* ``check_pipeline``: ARTOS pipelines are for on-policy PPO in sync mode on one machine's shared buffer;
* ``check_cluster``: runtime/store combinations that cannot work (docs/cluster.md).

Each raises ``ValueError`` naming the keys, so pydantic reports it with the key path and the CLI exits 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nimbus.algos.dqn.config import DQNConfig
from nimbus.algos.impala.config import ImpalaConfig
from nimbus.algos.sac.config import SACConfig

if TYPE_CHECKING:
    from nimbus.config import NimbusConfig, RuntimeConfig, StoreConfig

OFF_POLICY = ("dqn", "sac", "impala")
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def check_workflow(*, config: NimbusConfig) -> None:
    """Config rules of the workflows (raised as ValueError, so pydantic reports them at load time)."""
    name, workflow = config.algo.name, config.train.workflow
    if workflow == "sync" and name in OFF_POLICY:
        raise ValueError(f"algo.name: {name} is off-policy; it needs train.workflow: async")
    if workflow != "async":
        return
    if config.train.exact_resume:
        raise ValueError("train.exact_resume: only the sync workflow can resume bitwise (the async workflow's "
                         "replay buffer is not checkpointed); drop it, --resume still continues the run")
    if name not in OFF_POLICY:
        raise ValueError(f"train.workflow: async runs {', '.join(OFF_POLICY)}; algo.name {name} needs sync")
    if config.runtime.backend != "local" or config.store.backend != "shm":
        raise ValueError("train.workflow: async runs on runtime.backend: local with store.backend: shm for now "
                         "(its learner reads the shared-memory buffer in place); got "
                         f"{config.runtime.backend} / {config.store.backend}")
    if isinstance(config.algo, ImpalaConfig) and config.actors.fragment_steps != config.algo.rollout_length:
        raise ValueError(f"actors.fragment_steps ({config.actors.fragment_steps}) must equal "
                         f"algo.rollout_length ({config.algo.rollout_length}): IMPALA learns on whole fragments")
    rows = config.env.num_envs_per_actor * config.actors.fragment_steps
    if isinstance(config.algo, (DQNConfig, SACConfig)) and \
            (capacity := config.algo.buffer_capacity) < 2 * rows * _max_actors(config=config):
        raise ValueError(f"algo.buffer_capacity ({capacity}) must hold at least two fragments per actor "
                         f"({2 * rows * _max_actors(config=config)} rows)")


def check_pipeline(*, config: Any) -> None:
    """Config rules: pipelines are for on-policy PPO in sync mode on one machine's shared buffer."""
    pipeline = config.pipeline
    if not (pipeline.minibatch or pipeline.dual_stage):
        if pipeline.loader:
            raise ValueError("pipeline.loader is used by the pipelined learner: turn on pipeline.minibatch "
                             "or pipeline.dual_stage too")
        return
    problems = []
    if config.algo.name != "ppo":
        problems.append(f"algo.name is {config.algo.name!r} (pipelines: ppo)")
    if config.train.workflow != "sync":
        problems.append(f"train.workflow is {config.train.workflow!r} (pipelines: sync)")
    if config.runtime.backend != "local":
        problems.append(f"runtime.backend is {config.runtime.backend!r} (pipelines read the local shared buffer)")
    if getattr(config.algo, "normalize_obs", False):
        problems.append("algo.normalize_obs is on (its per-round moments need every actor before the learner)")
    if config.learner.device == "cuda":
        problems.append("learner.device is cuda (the pipelined learner runs on the cpu)")
    if problems:
        raise ValueError("pipeline.minibatch / pipeline.dual_stage need: " + "; ".join(problems))


def check_cluster(*, runtime: "RuntimeConfig", store: "StoreConfig") -> None:
    """Raise ValueError (naming the keys) for runtime/store combinations that cannot work."""
    on_one_machine = runtime.backend == "local" or runtime.address == "local"
    if store.backend == "ray" and runtime.backend != "ray":
        raise ValueError("store.backend: ray needs runtime.backend: ray (only Ray workers reach the object store)")
    if store.backend == "shm" and not on_one_machine:
        raise ValueError(f"store.backend: shm is per machine, but runtime.address is {runtime.address!r}: "
                         "use store.backend: redis or ray on a cluster")
    if store.backend == "redis" and store.fallback == "shm" and not on_one_machine:
        raise ValueError("store.fallback: shm only works when every function runs on this machine "
                         f"(runtime.address is {runtime.address!r})")
    if store.password is not None and store.password_env is not None:
        raise ValueError("store.password and store.password_env are exclusive: set one")
    if store.backend == "redis" and not store.url.startswith(_REDIS_SCHEMES):
        raise ValueError(f"store.url {store.url!r} must start with one of {_REDIS_SCHEMES}")


def _max_actors(*, config: "NimbusConfig") -> int:
    scaling = config.actors.scaling
    return int(max(getattr(scaling, name, 1) for name in ("num_actors", "max_actors", "initial_actors")))
