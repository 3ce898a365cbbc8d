"""The config's cross-section rules, as data checks: ``NimbusConfig`` runs them at load time.

They read only config values (no runtime, workflow or function code), so ``nimbus.config`` stays the
lowest layer: a rule that names a workflow's, the pipelines' or a backend's constraints lives here,
and the module it describes imports it from here.

* ``check_workflow``: which algorithms run in which workflow, and the offpolicy workflow's limits;
* ``check_pipeline``: ARTOS pipelines are for on-policy PPO in the onpolicy workflow on one machine's shared buffer;
* ``check_cluster``: runtime/store combinations that cannot work (docs/cluster.md);
* ``check_evaluation``: periodic evaluation's keys, and the trainers that run it.

Each raises ``ValueError`` naming the keys, so pydantic reports it with the key path and the CLI exits 2.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from nimbus.marless.config import check_multiagent_env

if TYPE_CHECKING:
    from nimbus.config.root import NimbusConfig
    from nimbus.config.sections import RuntimeConfig, StoreConfig

OFF_POLICY = ("dqn", "sac", "impala")
MULTI_AGENT = ("ippo", "mappo", "iql", "vdn", "qmix")
# the gymnasium ids envs/batched.py maps to an EnvPool task (its ENVPOOL_TWINS)
ENVPOOL_TWIN_IDS = frozenset({"CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0", "Hopper-v5",
                              "HalfCheetah-v5", "Walker2d-v5", "Ant-v5",
                              *(f"nimbus/Atari{game}-v5" for game in ("Pong", "Breakout", "BeamRider", "Qbert",
                                                                       "SpaceInvaders"))})
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def check_env_backend(*, config: NimbusConfig) -> None:
    """``actors.env_backend``: the on-policy actor reads it; EnvPool's envs cannot be snapshotted, and it builds
    only the envs it has a twin of, without a user's imports or wrappers (envs/batched.py)."""
    backend = config.actors.env_backend
    if backend in ("gymnasium", "auto"):
        return
    if config.train.workflow not in ("onpolicy", "stellaris"):
        raise ValueError(f"actors.env_backend: {backend} is read by the on-policy actor (train.workflow: onpolicy or "
                         f"stellaris); {config.train.workflow} steps its envs one by one: drop it")
    if backend != "envpool":
        return
    if config.train.exact_resume or config.actors.restore_slots:
        raise ValueError("actors.env_backend: envpool cannot snapshot its envs, which train.exact_resume and "
                         "actors.restore_slots need; use env_backend: vector (gymnasium's envs) or drop them")
    if config.env.id not in ENVPOOL_TWIN_IDS:
        raise ValueError(f"actors.env_backend: envpool has no twin of env.id {config.env.id!r}; it has "
                         f"{', '.join(sorted(ENVPOOL_TWIN_IDS))} (use vector or gymnasium)")
    if config.env.imports or config.env.wrappers or not set(config.env.kwargs) <= \
            ({"clip_rewards"} if config.env.id.startswith("nimbus/Atari") else set()):
        raise ValueError("actors.env_backend: envpool builds its own envs; env.imports, env.wrappers and "
                         "env.kwargs (but an Atari id's clip_rewards) need gymnasium's (use vector or gymnasium)")
    if importlib.util.find_spec("envpool") is None:
        raise ValueError("actors.env_backend: envpool needs the envpool extra: pip install nimbus-rl[envpool]")


def check_overlap(*, config: NimbusConfig) -> None:
    """``train.overlap`` is the plain onpolicy workflow's: one policy, no pipelines, no bitwise resume (the round in
    flight at a checkpoint is sampled but not learned)."""
    if not config.train.overlap:
        return
    if config.train.workflow != "onpolicy":
        raise ValueError(f"train.overlap overlaps the onpolicy workflow's actors and learner; {config.train.workflow} "
                         "schedules its own: drop it")
    if config.pipeline.minibatch or config.pipeline.dual_stage:
        raise ValueError("train.overlap and pipeline.minibatch / dual_stage both move the learner's start: pick one")
    if config.train.exact_resume:
        raise ValueError("train.overlap: a checkpoint falls while the next round samples, so --resume cannot continue "
                         "bitwise; drop train.exact_resume or train.overlap")
    if config.policies or config.pbt is not None:
        raise ValueError("train.overlap runs one policy; policies / pbt switch versions between rounds: drop it")


def _ppo_onpolicy_problems(*, config: Any, owner: str = "") -> list[str]:
    """What keeps ``config`` from PPO in the onpolicy workflow (compiled losses and pipelines need both): ``algo.name is
    …`` and ``train.workflow is …``; an ``owner`` adds what it needs to each, ``(pipelines: ppo)``."""
    needs = (("algo.name", config.algo.name, "ppo"), ("train.workflow", config.train.workflow, "onpolicy"))
    return [f"{key} is {value!r}" + (f" ({owner}: {wanted})" if owner else "")
            for key, value, wanted in needs if value != wanted]


def check_compile(*, config: NimbusConfig) -> None:
    """``learner.compile`` compiles PPO's minibatch loss in the onpolicy workflow's learner (algos/compiled.py)."""
    mode = config.learner.compile
    if mode == "off":
        return
    problems = _ppo_onpolicy_problems(config=config)
    if config.pipeline.minibatch or config.pipeline.dual_stage:
        problems.append("a pipeline is on (its streaming learner runs eagerly)")
    if problems:
        raise ValueError(f"learner.compile: {mode} compiles PPO\'s update in train.workflow: onpolicy without "
                         "pipelines; " + "; ".join(problems))


def check_workflow(*, config: NimbusConfig) -> None:
    """Config rules of the workflows (raised as ValueError, so pydantic reports them at load time)."""
    name, workflow = config.algo.name, config.train.workflow
    check_env_backend(config=config)
    check_overlap(config=config)
    check_compile(config=config)
    _check_learning_starts(algo=config.algo)
    if workflow == "onpolicy" and name in OFF_POLICY:
        raise ValueError(f"algo.name: {name} is off-policy; it needs train.workflow: offpolicy")
    if workflow == "stellaris":
        _check_stellaris(config=config)
    if workflow == "marless":
        _check_marless(config=config)
    elif name in MULTI_AGENT:
        raise ValueError(f"algo.name: {name} is a multi-agent algorithm; it needs train.workflow: marless")
    if workflow != "offpolicy":
        return
    if config.train.exact_resume:
        raise ValueError("train.exact_resume: only the onpolicy workflow can resume bitwise (the offpolicy workflow's "
                         "draws and actor timing do not repeat; train.checkpoint_replay keeps its buffer); drop it, "
                         "--resume still continues the run")
    if name not in OFF_POLICY:
        raise ValueError(f"train.workflow: offpolicy runs {', '.join(OFF_POLICY)}; algo.name {name} needs onpolicy")
    if config.runtime.backend not in ("local", "inline", "simulated") or config.store.backend != "shm":
        raise ValueError("train.workflow: offpolicy runs on runtime.backend: local, inline or simulated with "
                         "store.backend: shm for now "
                         "(its learner reads the shared-memory buffer in place); got "
                         f"{config.runtime.backend} / {config.store.backend}")
    if config.algo.name == "impala" and config.actors.fragment_steps != config.algo.rollout_length:
        raise ValueError(f"actors.fragment_steps ({config.actors.fragment_steps}) must equal "
                         f"algo.rollout_length ({config.algo.rollout_length}): IMPALA learns on whole fragments")
    rows = config.env.num_envs_per_actor * config.actors.fragment_steps
    if config.algo.name in ("dqn", "sac") and \
            (capacity := config.algo.buffer_capacity) < 2 * rows * _max_actors(config=config):
        raise ValueError(f"algo.buffer_capacity ({capacity}) must hold at least two fragments per actor "
                         f"({2 * rows * _max_actors(config=config)} rows)")


def _check_learning_starts(*, algo: Any) -> None:
    """A replay holds at most its capacity (data/replay.py Uniform, marless/value_learner.py): with
    learning_starts above it no gradient step would ever run (DQN, SAC, IQL, VDN)."""
    capacity_key = {"dqn": "buffer_capacity", "sac": "buffer_capacity", "iql": "replay_capacity",
                    "vdn": "replay_capacity", "qmix": "replay_capacity"}.get(algo.name)
    if capacity_key is not None and algo.learning_starts > (capacity := getattr(algo, capacity_key)):
        raise ValueError(f"algo.learning_starts ({algo.learning_starts}) exceeds algo.{capacity_key} ({capacity}): "
                         "the replay never holds that many rows, so no gradient step would run")


def _check_stellaris(*, config: NimbusConfig) -> None:
    """Stellaris's learner functions compute PPO or IMPACT gradients (IMPALA has no ratio for the truncation to
    act on); the actors' per-round observation moments and exact resume assume one learner per round."""
    algo = config.algo
    if algo.name not in ("ppo", "impala"):
        raise ValueError(f"train.workflow: stellaris runs ppo or impala (variant impact); algo.name {algo.name} "
                         f"needs {'offpolicy' if algo.name in OFF_POLICY else 'onpolicy'}")
    if algo.name == "impala":
        if algo.variant != "impact":
            raise ValueError("algo.variant: stellaris runs impala as variant impact (Stellaris's truncation acts "
                             "on IMPACT's ratio; plain IMPALA has none)")
        if config.actors.fragment_steps != algo.rollout_length:
            raise ValueError(f"actors.fragment_steps ({config.actors.fragment_steps}) must equal algo.rollout_length "
                             f"({algo.rollout_length}): IMPACT's gradient tasks are whole env columns")
        if (config.stellaris.slice_rows or algo.rollout_length) % algo.rollout_length:
            raise ValueError(f"stellaris.slice_rows ({config.stellaris.slice_rows}) must be a multiple of "
                             f"algo.rollout_length ({algo.rollout_length}): a slice is whole env columns")
    if getattr(config.algo, "normalize_obs", False):
        raise ValueError("algo.normalize_obs: not with train.workflow: stellaris (the observation statistics "
                         "are folded by the one learner of an onpolicy round)")
    if config.train.exact_resume:
        raise ValueError("train.exact_resume: only the onpolicy workflow can resume bitwise; drop it for stellaris")


def _check_marless(*, config: NimbusConfig) -> None:
    """MARLess runs its own policies (one per agent, shared by the sharing controller), from version 0."""
    check_multiagent_env(env=config.env)
    if config.algo.name not in MULTI_AGENT:
        raise ValueError(f"train.workflow: marless runs {', '.join(MULTI_AGENT)}; algo.name {config.algo.name} "
                         "is single-agent")
    if config.policies or config.pbt is not None:
        raise ValueError("policies / pbt: not with train.workflow: marless (its policies are the agents', "
                         "mapped by marless.sharing)")
    if config.train.exact_resume:
        raise ValueError("train.exact_resume is the onpolicy workflow's; drop it for marless, where "
                         "actors.restore_slots saves each rank's env slot with the checkpoint (IPPO and MAPPO then "
                         "resume bitwise)")
    if config.train.checkpoint_replay and config.algo.name in ("ippo", "mappo"):
        raise ValueError(f"train.checkpoint_replay: {config.algo.name} is on-policy and keeps no replay; drop it "
                         "(IQL and VDN keep theirs with it)")


def check_evaluation(*, config: NimbusConfig) -> None:
    """Periodic evaluation (train.eval_every_env_steps) runs in the run loop's RoundHook for every workflow, a
    population's members included (run/periodic_eval.py)."""
    train = config.train
    if train.target_eval_return is not None and train.eval_every_env_steps is None:
        raise ValueError("train.target_eval_return needs train.eval_every_env_steps (the evaluations it stops on)")
    if train.eval_every_env_steps is None:
        return
    if train.eval_episodes < 1:
        raise ValueError("train.eval_every_env_steps needs train.eval_episodes ≥ 1 (the episodes of each evaluation)")


def check_pipeline(*, config: Any) -> None:
    """Config rules: pipelines are for on-policy PPO in the onpolicy workflow on one machine's shared buffer."""
    pipeline = config.pipeline
    if not (pipeline.minibatch or pipeline.dual_stage):
        if pipeline.loader:
            raise ValueError("pipeline.loader is used by the pipelined learner: turn on pipeline.minibatch "
                             "or pipeline.dual_stage too")
        return
    problems = _ppo_onpolicy_problems(config=config, owner="pipelines")
    if config.runtime.backend != "local":
        problems.append(f"runtime.backend is {config.runtime.backend!r} (pipelines read the local shared buffer)")
    if getattr(config.algo, "normalize_obs", False):
        problems.append("algo.normalize_obs is on (its per-round moments need every actor before the learner)")
    if config.learner.device == "cuda":
        problems.append("learner.device is cuda (the pipelined learner runs on the cpu)")
    if problems:
        raise ValueError("pipeline.minibatch / pipeline.dual_stage need: " + "; ".join(problems))


def check_cluster(*, runtime: RuntimeConfig, store: StoreConfig) -> None:
    """Raise ValueError (naming the keys) for runtime/store combinations that cannot work."""
    on_one_machine = runtime.backend in ("local", "inline") or runtime.address == "local"
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
    check_authentication(runtime=runtime, store=store)


def check_authentication(*, runtime: RuntimeConfig, store: StoreConfig) -> None:
    """P11: leaving this machine takes authentication, or an explicit ``allow_insecure: true``.

    Redis: a ``redis://`` URL to a non-loopback host needs a password (in the URL, ``store.password`` or
    ``store.password_env``) or TLS (``rediss://``). Ray: an address other than ``local`` or a loopback
    host:port needs Ray's token auth (``RAY_AUTH_MODE=token`` in the driver's environment), which
    ``auto`` needs too: a ``ray start`` cluster listens beyond this machine.
    """
    if (store.backend == "redis" and not store.allow_insecure and store.url.startswith("redis://")
            and not _is_loopback(urlsplit(store.url).hostname)
            and store.password is None and store.password_env is None and urlsplit(store.url).password is None):
        raise ValueError(f"store.url {store.url!r} reaches another machine with neither a password "
                         "nor TLS: set store.password_env (or use rediss://), or store.allow_insecure: true "
                         "on a network you trust")
    if (runtime.backend == "ray" and not runtime.allow_insecure and runtime.address != "local"
            and not _is_loopback(_ray_host(runtime.address)) and os.environ.get("RAY_AUTH_MODE") != "token"):
        raise ValueError(f"runtime.address {runtime.address!r} joins a Ray cluster without authentication: "
                         "set RAY_AUTH_MODE=token and the cluster's token (docs/cluster.md), or "
                         "runtime.allow_insecure: true on a network you trust")


def _ray_host(address: str) -> str | None:
    """The host of ``host:port`` or ``ray://host:port``; None for ``auto`` (a cluster on this node's interfaces)."""
    if address == "auto":
        return None
    return urlsplit(address if "://" in address else f"ray://{address}").hostname


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def peak_actors(*, scaling: Any) -> int:
    """The most actors ``actors.scaling`` may run in one round."""
    return int(max(getattr(scaling, name, 1) for name in ("num_actors", "max_actors", "initial_actors")))


def _max_actors(*, config: NimbusConfig) -> int:
    return peak_actors(scaling=config.actors.scaling)
