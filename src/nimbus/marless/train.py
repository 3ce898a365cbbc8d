"""``train.workflow: multiagent`` (MARLess): build the pool, publish every agent's version 0, run the rounds,
checkpoint each policy, evaluate and summarise.

Policies are named after agents (``p_<agent>``); the sharing controller maps agents onto a subset of them
(marless/sharing.py). Each policy's checkpoints go to ``<run_dir>/policies/<policy>/checkpoints`` (its
networks and the run's state, marless/checkpoint.py, from which ``--resume`` continues), the agent→policy
map of every round to ``marl.jsonl`` and the metrics (global and per-agent return, policies, actors, learner
and actor cost) to ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from nimbus.algos.multiagent import initial_messages, make_marl_algo
from nimbus.config import NimbusConfig
from nimbus.data.checkpoint import Checkpointer
from nimbus.data.codec import Message
from nimbus.data.shm import claim_run_prefix, release_run_prefix
from nimbus.envs.parallel import agent_spaces, global_state, make_parallel_env
from nimbus.envs.parallel_snapshot import check_parallel_snapshot
from nimbus.envs.snapshot import require_snapshot
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import CheckpointError, ConfigError
from nimbus.marless.checkpoint import check_policies, load_policies, policy_directory, publish_policies, \
    save_policies
from nimbus.marless.evaluate import evaluate_agents
from nimbus.marless.scaling import MarlessActorScaler
from nimbus.marless.sharing import SharingController, space_signature
from nimbus.marless.workflow import MarlParts, MarlProgress, MultiAgentWorkflow, critic_key
from nimbus.models.weights import weights_key
from nimbus.report.metrics import MetricsSink
from nimbus.roles.specs import function_spec, role_spec
from nimbus.run.build import build_shared, make_run_dir
from nimbus.run.loop import RunSummary, TrainResult, _Interrupt, _should_stop
from nimbus.types import RoundMetrics

log = logging.getLogger(__name__)
MA_ACTOR_ENTRYPOINT = "nimbus.marless.actor:ma_actor_function"
ROLE_ENTRYPOINTS = {"postprocess": "nimbus.marless.learner:postprocess_function",
                    "critic": "nimbus.marless.learner:critic_function",
                    "policy": "nimbus.marless.learner:policy_function"}
VALUE_ROLE_ENTRYPOINTS = {"postprocess": "nimbus.marless.value_learner:vdn_postprocess_function",
                          "policy": "nimbus.marless.value_learner:value_policy_function"}


def policy_name(agent: str) -> str:
    return f"p_{agent}"


def probe_agents(*, config: NimbusConfig) -> tuple[tuple[str, ...], dict[str, EnvSpaces], int]:
    """The env's agents (sorted), each agent's spaces and the global state's size."""
    env = make_parallel_env(env_id=config.env.id, seed=config.seed, kwargs=dict(config.env.kwargs),
                            imports=config.env.imports)
    try:
        env.reset(seed=config.seed)
        spaces = agent_spaces(env=env)
        state_dim = int(np.asarray(global_state(env=env)).size)
        if config.actors.restore_slots:   # exit 2 unless a snapshot restores it exactly (envs/parallel_snapshot.py)
            require_snapshot(check=lambda: check_parallel_snapshot(env=env, seed=config.seed), env_id=config.env.id,
                             key="actors.restore_slots")
    finally:
        env.close()
    return tuple(sorted(spaces)), spaces, state_dim


def function_specs(*, config: NimbusConfig, algo: object) -> dict[str, object]:
    """The actor and the algorithm's learner roles; the policy function takes the ``learner`` resources."""
    entrypoints = ROLE_ENTRYPOINTS if algo.on_policy else VALUE_ROLE_ENTRYPOINTS
    specs = {"actor": role_spec(config=config, role="actor", entrypoint=MA_ACTOR_ENTRYPOINT)}
    for role in algo.roles:
        resources = config.role_function(role="learner" if role == "policy" else role)
        specs[role] = function_spec(name=role, entrypoint=entrypoints[role], kind=role, function=resources)
    return specs


def _fixed_actors(*, config: NimbusConfig) -> int:
    """``actors.scaling``'s count: what every round uses with ``marl.scaling: fixed``."""
    scaling = config.actors.scaling
    for name in ("num_actors", "initial_actors", "min_actors"):
        if hasattr(scaling, name):
            return int(getattr(scaling, name))
    return 1


def check_agent_policy(*, config: NimbusConfig, agents: tuple[str, ...]) -> None:
    """``marl.agent_policy`` names agents of the env and their policies (``p_<agent>``): else exit 2."""
    known = {policy_name(agent) for agent in agents}
    for agent, policy in config.marl.agent_policy.items():
        if agent not in agents:
            raise ConfigError(f"marl.agent_policy.{agent}: {config.env.id} has no agent {agent!r} "
                              f"(agents: {', '.join(agents)})")
        if policy not in known:
            raise ConfigError(f"marl.agent_policy.{agent}: unknown policy {policy!r} (policies: {', '.join(sorted(known))})")


def train_multiagent(*, config: NimbusConfig, run_dir: Path | None = None,
                     resume_from: Path | None = None) -> TrainResult:
    """Run MARLess rounds; with ``resume_from`` (a run directory) every policy continues from the newest round
    they all have a checkpoint of (marless/checkpoint.py says what comes back)."""
    if resume_from is not None and not (Path(resume_from) / "policies").is_dir():
        raise CheckpointError(f"cannot resume {resume_from} as a multiagent run: it has no policies/ directory")
    agents, spaces, state_dim = probe_agents(config=config)
    check_agent_policy(config=config, agents=agents)
    algo = make_marl_algo(config=config.algo)
    marl = config.marl
    sharing = SharingController(config=marl, agents=list(agents),
                                compatible={a: space_signature(spaces=spaces[a]) for a in agents}, seed=config.seed)
    scaler = MarlessActorScaler(config=marl, num_agents=len(agents), fixed_actors=_fixed_actors(config=config))
    run_dir = run_dir or (Path(resume_from) if resume_from is not None else make_run_dir(config=config))
    run_dir.mkdir(parents=True, exist_ok=True)
    shm_prefix = claim_run_prefix()
    try:
        shared = build_shared(config=config, run_dir=run_dir, shm_prefix=shm_prefix)
    except BaseException:
        release_run_prefix(prefix=shm_prefix)
        raise
    metrics = MetricsSink(run_dir=run_dir, tensorboard=config.output.tensorboard,
                          status_line=config.output.status_line)
    parts = MarlParts(config=config, shared=shared, run_dir=run_dir, agents=agents, spaces=spaces, algo=algo,
                      specs=function_specs(config=config, algo=algo), sharing=sharing, scaler=scaler, metrics=metrics)
    rows: list[RoundMetrics] = []
    started = time.perf_counter()
    try:
        progress = _start(parts=parts, spaces=spaces, state_dim=state_dim, resume_from=resume_from)
        checkpointers = {policy: Checkpointer(directory=policy_directory(run_dir=run_dir, policy=policy),
                                              keep=config.train.keep_checkpoints)
                         for policy in map(policy_name, agents)}
        workflow = MultiAgentWorkflow(parts=parts, progress=progress, on_round=lambda row: None)

        def on_round(row: RoundMetrics) -> None:
            rows.append(row)
            metrics.write(row=row, runtime={})
            if row.round % config.train.checkpoint_every_rounds == config.train.checkpoint_every_rounds - 1:
                save_policies(parts=parts, progress=progress, checkpointers=checkpointers)

        workflow.on_round = on_round
        with _Interrupt(workflow=workflow) as interrupt:
            workflow.run(should_stop=lambda p: _should_stop(config=config, progress=p) is not None)
        stopped_by = interrupt.received or _should_stop(config=config, progress=progress) or "interrupted"
        save_policies(parts=parts, progress=progress, checkpointers=checkpointers)
        eval_return = None
        if config.train.eval_episodes > 0 and stopped_by not in ("SIGINT", "SIGTERM"):
            newest = {policy: shared.store.get(key=weights_key(policy=policy, version=version))
                      for policy, version in progress.versions.items()}
            eval_return = evaluate_agents(config=config, algo=algo, weights=newest, agent_policy=progress.agent_policy,
                                          episodes=config.train.eval_episodes, seed=config.seed + 10_000).mean_return
        totals = shared.ledger.totals()
        wall_s = time.perf_counter() - started + progress.wall_s_before
        most_actors = max((row.num_actors for row in rows), default=1)
        summary = RunSummary(
            final_return=float(np.mean(progress.recent_returns)) if progress.recent_returns else None,
            eval_return=eval_return, env_steps=progress.env_steps, episodes=progress.episodes,
            rounds=progress.rounds, policy_version=progress.policy_version, wall_s=wall_s,
            invocations=totals.invocations, attempts=totals.attempts, cold_starts=totals.cold_starts,
            retries=totals.retries, serverless_cost_usd=workflow.cost_usd(),
            serverful_cost_usd=shared.pricing.serverful_cost_usd(
                wall_s=wall_s, peak_actor_cpus=most_actors * config.actors.function.cpus,
                peak_learner_gpus=config.learner.function.gpus),
            stopped_by=stopped_by)
    finally:
        metrics.close()
        shared.close()
    (run_dir / "summary.json").write_text(json.dumps(asdict(summary), indent=1))
    if config.output.report:
        from nimbus.report.render import render_report
        render_report(run_dir=run_dir)
    return TrainResult(run_dir=run_dir, summary=summary, rows=rows)


def _start(*, parts: MarlParts, spaces: dict[str, EnvSpaces], state_dim: int,
           resume_from: Path | None) -> MarlProgress:
    """Version 0 of every policy, or (``resume_from``) the checkpointed versions; the progress to go on from."""
    initial = {policy_name(agent): initial_messages(algo=parts.algo, spaces=spaces[agent], state_dim=state_dim,
                                                    num_agents=len(parts.agents), seed=parts.config.seed + index)
               for index, agent in enumerate(parts.agents)}
    if resume_from is None:
        progress = MarlProgress(agent_policy=parts.sharing.initial_map())
        _publish_initial(parts=parts, progress=progress, initial=initial)
        return progress
    states = load_policies(path=Path(resume_from), policies=list(initial))
    check_policies(states=states, parts=parts, expected=initial)
    progress = publish_policies(states=states, parts=parts)
    log.warning("resuming from round %d (policy versions %s, %d env steps)", progress.rounds,
                progress.versions, progress.env_steps)
    return progress


def _publish_initial(*, parts: MarlParts, progress: MarlProgress, initial: dict[str, dict[str, Message]]) -> None:
    """Version 0 of every agent's policy (and critic), seeded per agent; all of them, so that sharing can later
    hand any agent its own policy."""
    store = parts.shared.store
    for policy, messages in initial.items():
        store.put(key=weights_key(policy=policy, version=0), message=messages["weights"])
        progress.versions[policy] = 0
        if "critic" in messages:
            store.put(key=critic_key(policy=policy, version=0), message=messages["critic"])
            progress.critic_versions[policy] = 0
