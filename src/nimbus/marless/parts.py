"""What a MARLess run is made of (``train.workflow: marless``): its progress, its parts, the env's agents and
spaces, and the functions by role. marless/workflow.py builds them (``MarlessWorkflow.build``).

Policies are named after agents (``p_<agent>``); the sharing controller maps agents onto a subset of them
(marless/sharing.py). Each policy's checkpoints go to ``<run_dir>/policies/<policy>/checkpoints`` (its
networks and the run's state, marless/checkpoint.py, from which ``--resume`` continues), the agent→policy
map of every round to ``marless.jsonl`` and the metrics (global and per-agent return, policies, actors, learner
and actor cost) to ``metrics.jsonl``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nimbus.config import NimbusConfig
from nimbus.envs.parallel import agent_spaces, global_state, make_parallel_env
from nimbus.envs.parallel_snapshot import check_parallel_snapshot
from nimbus.envs.snapshot import require_snapshot
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError
from nimbus.marless.agent_id import with_agent_id
from nimbus.marless.checks import check_agent_spaces
from nimbus.roles.specs import function_spec, role_spec
from nimbus.types import Progress

if TYPE_CHECKING:
    from nimbus.algos.multiagent.registry import MultiAgentAlgorithm
    from nimbus.runtime.base import FunctionSpec
    from nimbus.types import Shared

log = logging.getLogger(__name__)
MARLESS_ACTOR_ENTRYPOINT = "nimbus.marless.actor:marless_actor_function"
ROLE_ENTRYPOINTS = {"postprocess": "nimbus.marless.learner:postprocess_function",
                    "critic": "nimbus.marless.learner:critic_function",
                    "policy": "nimbus.marless.learner:policy_function"}
VALUE_ROLE_ENTRYPOINTS = {"postprocess": "nimbus.marless.team_rows:vdn_postprocess_function",
                          "policy": "nimbus.marless.value_learner:value_policy_function"}
TEAM_ENTRYPOINT = "nimbus.marless.team_learner:team_value_function"   # VDN, QMIX: one policy function a round


def policy_name(agent: str) -> str:
    return f"p_{agent}"


def policy_spaces(*, config: NimbusConfig, agents: tuple[str, ...], spaces: dict[str, EnvSpaces],
                  agent_id: bool) -> dict[str, EnvSpaces]:
    """Every policy of the run → the spaces its networks are built for: ``p_<agent>`` for each agent (agent order),
    then ``marless.policy_mapping``'s names (their first agent's spaces); with agent-id conditioning the
    observation carries the one-hot (marless/agent_id.py)."""
    def net(agent: str) -> EnvSpaces:
        return with_agent_id(spaces=spaces[agent], num_agents=len(agents)) if agent_id else spaces[agent]
    out = {policy_name(agent): net(agent) for agent in agents}
    for agent, policy in sorted(config.marless.policy_mapping.items()):
        out.setdefault(policy, net(agent))
    return out


def probe_agents(*, config: NimbusConfig) -> tuple[tuple[str, ...], dict[str, EnvSpaces], int]:
    """The env's agents (sorted), each agent's spaces and the global state's size."""
    env = make_parallel_env(env_id=config.env.id, seed=config.seed, kwargs=dict(config.env.kwargs),
                            imports=config.env.imports)
    try:
        env.reset(seed=config.seed)
        spaces = agent_spaces(env=env)
        check_agent_spaces(spaces=spaces, algo_name=config.algo.name, env_id=config.env.id)
        if config.algo.name == "qmix":
            require_env_state(env=env, env_id=config.env.id)
        state_dim = int(np.asarray(global_state(env=env)).size)
        if config.actors.restore_slots:   # exit 2 unless a snapshot restores it exactly (envs/parallel_snapshot.py)
            require_snapshot(check=lambda: check_parallel_snapshot(env=env, seed=config.seed), env_id=config.env.id,
                             key="actors.restore_slots")
    finally:
        env.close()
    return tuple(sorted(spaces)), spaces, state_dim


def require_env_state(*, env: Any, env_id: str) -> None:
    """QMIX mixes over the env's own global state: exit 2 naming ``algo.name`` when ``env.state()`` is missing."""
    try:
        env.state()
    except (NotImplementedError, AttributeError) as exc:
        raise ConfigError(f"algo.name: qmix mixes the agents' Q values over the env's global state, but {env_id} "
                          f"has no state() ({type(exc).__name__}); use vdn (no state needed), or give the env a "
                          "state() method") from exc


def function_specs(*, config: NimbusConfig, algo: MultiAgentAlgorithm) -> dict[str, FunctionSpec]:
    """The actor and the algorithm's learner roles; the policy function takes the ``learner`` resources."""
    entrypoints = ROLE_ENTRYPOINTS if algo.on_policy else VALUE_ROLE_ENTRYPOINTS
    if getattr(algo, "joint", False):
        entrypoints = {**entrypoints, "policy": TEAM_ENTRYPOINT}
    specs = {"actor": role_spec(config=config, role="actor", entrypoint=MARLESS_ACTOR_ENTRYPOINT)}
    for role in algo.roles:
        resources = config.role_function(role="learner" if role == "policy" else role)
        specs[role] = function_spec(name=role, entrypoint=entrypoints[role], kind=role, function=resources)
    return specs


def fixed_actors(*, config: NimbusConfig) -> int:
    """``actors.scaling``'s count: what every round uses with ``marless.scaling: fixed``."""
    scaling = config.actors.scaling
    for name in ("num_actors", "initial_actors", "min_actors"):
        if hasattr(scaling, name):
            return int(getattr(scaling, name))
    return 1


def check_agent_policy(*, config: NimbusConfig, agents: tuple[str, ...]) -> None:
    """``marless.agent_policy`` names agents of the env and their policies (``p_<agent>``): else exit 2."""
    known = {policy_name(agent) for agent in agents}
    for agent, policy in config.marless.agent_policy.items():
        if agent not in agents:
            raise ConfigError(f"marless.agent_policy.{agent}: {config.env.id} has no agent {agent!r} "
                              f"(agents: {', '.join(agents)})")
        if policy not in known:
            raise ConfigError(f"marless.agent_policy.{agent}: unknown policy {policy!r} "
                              f"(policies: {', '.join(sorted(known))})")


def critic_key(*, policy: str, version: int) -> str:
    return f"critic/{policy}/{version}"


@dataclass
class MarlessProgress(Progress):
    """A run's counters plus each policy's versions and the agent→policy map."""

    versions: dict[str, int] = field(default_factory=dict)          # policy network, per policy
    critic_versions: dict[str, int] = field(default_factory=dict)   # critic network (actor-critic algos)
    agent_policy: dict[str, str] = field(default_factory=dict)
    learner_invocations: int = 0
    next_actors: int = 0            # the actor count the next round uses (0: the scaler's initial count)
    replays: dict[str, list[str]] = field(default_factory=dict)   # IQL/VDN: each replay's Store keys, oldest first
    mixer_version: int = 0          # QMIX: the mixer's newest version (mixer/weights/<v>)


@dataclass(frozen=True)
class MarlessParts:
    """What the workflow drives: the pool, the functions by role, the controllers and the sinks."""

    config: Any                      # NimbusConfig
    shared: Shared
    run_dir: Path
    agents: tuple[str, ...]          # sorted possible agents
    spaces: dict[str, Any]           # agent → EnvSpaces
    algo: Any                        # nimbus.algos.multiagent MultiAgentAlgorithm
    specs: dict[str, Any]            # role → FunctionSpec ("actor", and the algorithm's roles)
    sharing: Any                     # marless/sharing.py SharingController
    scaler: Any                      # marless/scaling.py MarlessActorScaler
    metrics: Any                     # report/metrics.py MetricsSink
    agent_id: bool = False           # policies read obs ⊕ one-hot(agent) (marless/agent_id.py)
    policy_spaces: dict[str, Any] = field(default_factory=dict)   # policy → the spaces its networks are built for
    state_dim: int = 0               # the global state's size (QMIX's mixer input)
