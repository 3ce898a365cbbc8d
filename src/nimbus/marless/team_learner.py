"""VDN's and QMIX's learner: one *policy function* a round for the whole team (MARLess §4.2, Fig. 5c).

``team_value_function`` trains every policy the agents map to (one per agent, a few shared groups or one fully
shared policy: the same code) and, for QMIX, the mixer, **jointly**: each of ``gradient_steps`` steps samples
``batch_size`` joint rows of the team's replay (``post/team/r<k>``, marless/team_rows.py), computes one Huber TD
loss on Q_tot and takes one backward pass through all the team's parameters, one gradient-norm clip over all of
them, then every network's Adam step. Adam is per parameter, so the per-network Adams stepped together are one
Adam over all the parameters; each policy keeps its own optimizer state in ``optim/<p>/<v>`` as IQL's does.

- VDN: Q_tot = Σ_a alive_a · Q_{policy(a)}(o_a, u_a), y = R + γ Σ_a (1 − terminated_a) Q̄_{policy(a)}(o'_a, a*_a).
- QMIX: Q_tot = f_s(alive_a · Q_{policy(a)}(o_a, u_a) …), y = R + γ(1 − terminated) f̄_{s'}((1 − terminated_a) ·
  Q̄_{policy(a)}(o'_a, a*_a) …), f the mixer over the global state (algos/multiagent/qmix.py), f̄ its target.

R is the team reward (the sum of the agents'), a*_a the online network's argmax (double Q) or the target's,
``terminated`` the team's (every agent terminated). A policy shared by several agents gets the gradient of every
one of its agents' terms. Each network's target is a hard copy of it every ``target_update_period`` of its own
gradient steps, counted across rounds by its weights header's ``grad_steps`` (the policies of a team step
together, so their counts differ only after sharing copies a policy back). The function publishes every
policy's ``weights/<p>/<v+1>`` (ε from the run's progress), ``optim/<p>/<v+1>``, ``target/<p>/<v+1>`` and
QMIX's ``mixer/{weights,optim,target}/<m+1>``, all tagged with the invocation id, and samples with a generator
seeded from (seed, round): a retry recomputes the same values. With ``probe`` it probes each policy's convexity
on the newest round's joint rows: the Hessian of the joint objective with respect to that policy's parameters,
the others held at their updated values. It returns a `TeamResult`: a `TeamPolicyResult` per policy it trained.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import torch
from torch import nn

from nimbus.algos.base import LossOutput
from nimbus.algos.multiagent.iql import NEXT_ACTION_MASK, QPolicy, ValueAlgorithm, next_values
from nimbus.algos.multiagent.qmix import QMixer, mixer_key
from nimbus.algos.multiagent.vdn import vdn_q_tot, vdn_targets
from nimbus.algos.step import guarded_step
from nimbus.analysis.hessian import HESSIAN_RATIO_KEY
from nimbus.data.codec import Message
from nimbus.data.request import WireRequest
from nimbus.data.store import KeyNotFound, Store
from nimbus.data.stores import put_all
from nimbus.marless.device_loop import StepRows, host_draws
from nimbus.marless.results import MarlessResult
from nimbus.marless.rows import ALIVE
from nimbus.marless.value_learner import (
    DEFAULT_PROBE,
    TEAM,
    VALUE_STATS,
    load_optimizer_if_any,
    load_replay,
    newest_rows,
    own_networks,
    replay_rows,
    spaces_from_header,
    target_key,
    value_invocation,
)
from nimbus.models.weights import load_model, model_to_message, optimizer_to_message, version_items
from nimbus.nitro.probe import probe_policy
from nimbus.roles.actor import derive_seed
from nimbus.roles.probe import ProbeRequest
from nimbus.runtime.base import FunctionContext

TEAM_HEADER = "team_learner"
Net = TypeVar("Net", bound=nn.Module)   # a policy's QPolicy or QMIX's mixer


@dataclass(frozen=True)
class TeamLearnerRequest(WireRequest, header=TEAM_HEADER, affinity=f"learner-{TEAM}"):
    round: int
    algo: dict[str, Any]              # VDNConfig / QMIXConfig as a dict
    all_agents: Sequence[str]         # every agent, sorted: the team
    agent_policy: dict[str, str]      # agent → policy; every policy in it is trained
    policy_versions: dict[str, int]   # each policy's version to update
    replay_keys: Sequence[str]        # post/team/r<k> of the last rounds, oldest first
    spaces: dict[str, dict[str, Any]]  # policy → spaces_header(...)
    seed: int
    progress: float                   # 0..1 through the run: ε's schedule
    mixer_version: int = 0            # QMIX: the mixer's version to update
    state_dim: int = 0                # QMIX: the global state's size
    torch_threads: int = 1
    probe: bool | dict[str, Any] | None = False   # True (DEFAULT_PROBE) or a ProbeRequest header: convexity


@dataclass(frozen=True)
class TeamPolicyResult(MarlessResult):
    """One policy's part of the team update's result (``TeamResult.policies``; its weights, optimizer and target are
    in the Store under version ``policy_version``)."""

    STATS: ClassVar[tuple[str, ...]] = VALUE_STATS   # the joint TD loss's: each the mean over the steps taken
    policy_version: int         # the version the update published
    stats: dict[str, float]
    gradient_steps_run: int     # this update's joint steps taken
    nonfinite_steps: int        # joint steps a non-finite loss or gradient skipped (train.max_nonfinite_losses)
    nonfinite: bool             # nonfinite_steps > 0
    grad_steps: int             # the policy's gradient steps so far, across rounds: its target's refresh clock
    target_refreshes: int       # this update's target copies
    replay_rows: int
    convexity: float            # C = −λmax/λmin of the joint objective w.r.t. this policy; NaN unprobed
    extras: dict[str, float]    # the probe's readings (nitro/probe.py); {} unprobed
    probe_rows: float           # the rows the probe read; 0 unprobed
    epsilon: float              # the published weights' exploration rate
    policy_s: float             # the one team invocation's time, under each policy it trained


@dataclass(frozen=True)
class TeamResult(MarlessResult):
    """What the team's policy function returns: each policy's part as a nested table of the header (the simulated
    runtime's timings and the row read only the top level and ``extras`` of each, as before the class)."""

    policies: dict[str, TeamPolicyResult]   # every policy the update trained
    mixer_version: int                      # QMIX: the version published; VDN: the request's, unchanged
    policy_s: float
    device: str

    def wire_header(self) -> dict[str, Any]:
        return {**vars(self), "policies": {policy: part.wire_header() for policy, part in self.policies.items()}}

    @classmethod
    def from_message(cls, message: Message) -> TeamResult:
        tables: dict[str, dict[str, Any]] | None = message.header.get("policies")
        if tables is None:   # WireResult names the missing field
            return super().from_message(message)
        parts = {policy: TeamPolicyResult.from_message(Message(header=table)) for policy, table in tables.items()}
        return super().from_message(Message(header={**message.header, "policies": parts}, arrays=message.arrays))


@dataclass
class TrainedNet(Generic[Net]):
    """One network the team update trains: online, target, its Adam and its gradient-step count."""

    online: Net
    target: Net
    optimizer: torch.optim.Optimizer
    grad_steps: int
    refreshes: int = field(default=0)


def team_value_function(*, context: FunctionContext, request: Message) -> Message:
    req = TeamLearnerRequest.from_message(request)
    started = time.perf_counter()
    store, algo, device = value_invocation(context=context, request=request, config=req.algo,
                                           torch_threads=req.torch_threads)
    nets = {policy: load_policy(store=store, algo=algo, req=req, policy=policy, device=device)
            for policy in sorted(set(req.agent_policy.values()))}
    mixer = load_mixer(store=store, algo=algo, req=req, device=device) if algo.name == "qmix" else None
    replay = load_replay(context=context, store=store, keys=req.replay_keys, capacity=algo.config.replay_capacity,
                         device=device)
    objective = TeamObjective(config=algo.config, agent_policy=req.agent_policy, agents=req.all_agents, nets=nets,
                              mixer=mixer)
    generator = torch.Generator().manual_seed(derive_seed(req.seed, zlib.crc32(TEAM.encode()), req.round))
    stats = train_team(objective=objective, replay=replay, config=algo.config, generator=generator)
    puts = publish_items(req=req, nets=nets, mixer=mixer, epsilon=algo.epsilon_at(progress=req.progress))
    put_all(store=store, writer=context.invocation_id, items=puts)
    newest = newest_rows(context=context, keys=req.replay_keys, device=device) if req.probe else {}
    probes = {policy: probe_stats(objective=objective, policy=policy, replay=newest, req=req) for policy in nets}
    elapsed_s = time.perf_counter() - started
    policies = {policy: TeamPolicyResult(
        policy_version=req.policy_versions[policy] + 1, stats={name: stats[name] for name in VALUE_STATS},
        gradient_steps_run=stats["gradient_steps_run"], nonfinite_steps=stats["nonfinite_steps"],
        nonfinite=stats["nonfinite"], grad_steps=net.grad_steps, target_refreshes=net.refreshes,
        replay_rows=replay_rows(replay), **probes[policy], policy_s=elapsed_s) for policy, net in nets.items()}
    return TeamResult(policies=policies, mixer_version=req.mixer_version + (mixer is not None), policy_s=elapsed_s,
                      device=str(device)).wire_message()


def load_policy(*, store: Store, algo: ValueAlgorithm, req: TeamLearnerRequest, policy: str,
                device: torch.device) -> TrainedNet[QPolicy]:
    version = req.policy_versions[policy]
    online, target, optimizer, grad_steps = own_networks(
        store=store, algo=algo, spaces=spaces_from_header(req.spaces[policy]), policy=policy, version=version,
        device=device)
    return TrainedNet(online=online, target=target, optimizer=optimizer, grad_steps=grad_steps)


def load_mixer(*, store: Store, algo: Any, req: TeamLearnerRequest, device: torch.device) -> TrainedNet[QMixer]:
    """QMIX's mixer at ``req.mixer_version`` (its target: the weights themselves at version 0)."""
    message = store.get(key=mixer_key(part="weights", version=req.mixer_version))
    online = algo.make_mixer(state_dim=req.state_dim, num_agents=len(req.all_agents)).to(device)
    load_model(model=online, message=message)
    target = algo.make_mixer(state_dim=req.state_dim, num_agents=len(req.all_agents)).to(device)
    try:
        load_model(model=target, message=store.get(key=mixer_key(part="target", version=req.mixer_version)))
    except KeyNotFound:
        target.load_state_dict(online.state_dict())
    optimizer = algo.make_mixer_optimizer(mixer=online)
    load_optimizer_if_any(store=store, optimizer=optimizer, key=mixer_key(part="optim", version=req.mixer_version))
    return TrainedNet(online=online, target=target.requires_grad_(False), optimizer=optimizer,
                      grad_steps=int(message.header.get("grad_steps", 0)))


class TeamObjective:
    """The team's TD loss on a batch of joint rows (VDN: the sum; QMIX: the mixer). ``loss(batch, replace)``:
    ``replace`` maps a policy to the module to use in its place (the Hessian probe's parameters)."""

    def __init__(self, *, config: Any, agent_policy: dict[str, str], agents: Sequence[str],
                 nets: dict[str, TrainedNet[QPolicy]], mixer: TrainedNet[QMixer] | None) -> None:
        self.config, self.agent_policy, self.agents, self.nets, self.mixer = config, agent_policy, agents, nets, mixer

    def parameters(self) -> list[nn.Parameter]:
        modules = [net.online for net in self.nets.values()] + ([self.mixer.online] if self.mixer else [])
        return [p for module in modules for p in module.parameters()]

    def loss(self, *, batch: dict[str, torch.Tensor], replace: dict[str, QPolicy] | None = None) -> LossOutput:
        loss, stats = self.terms(batch=batch, replace=replace)
        return LossOutput(loss=loss, stats=dict(zip(VALUE_STATS[1:], stats[1:].tolist(), strict=True)))

    def terms(self, *, batch: dict[str, torch.Tensor],
              replace: dict[str, QPolicy] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss and its statistics (``VALUE_STATS`` order, detached), on the device: no host read."""
        c, replace = self.config, replace or {}
        taken, following, terminated, alive = [], [], [], []
        for agent in self.agents:
            policy = self.agent_policy[agent]
            online, target = replace.get(policy, self.nets[policy].online), self.nets[policy].target
            q = online.q(batch[f"{agent}/obs"])
            taken.append(q.gather(1, batch[f"{agent}/actions"].long().view(-1, 1)).squeeze(1))
            with torch.no_grad():
                q_next_target = target.q(batch[f"{agent}/next_obs"])
                q_next_online = online.q(batch[f"{agent}/next_obs"]) if c.double_q else q_next_target
                following.append(next_values(q_next_online=q_next_online, q_next_target=q_next_target,
                                             double_q=c.double_q,
                                             next_action_mask=batch.get(f"{agent}/{NEXT_ACTION_MASK}")))
            terminated.append(batch[f"{agent}/terminated"])
            alive.append(batch.get(f"{agent}/{ALIVE}", torch.ones_like(terminated[-1], dtype=torch.bool)))
        q_tot, y = self._mix(batch=batch, taken=torch.stack(taken), following=torch.stack(following),
                             terminated=torch.stack(terminated), alive=torch.stack(alive))
        loss = nn.functional.huber_loss(q_tot, y, delta=c.huber_delta)
        return loss, torch.stack([loss.detach(), q_tot.detach().mean(), (y - q_tot.detach()).abs().mean()])

    def _mix(self, *, batch: dict[str, torch.Tensor], taken: torch.Tensor, following: torch.Tensor,
             terminated: torch.Tensor, alive: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q_tot [B], y [B]) from [A, B] per-agent values."""
        if self.mixer is None:   # VDN
            return vdn_q_tot(q_taken_per_agent=taken, alive_per_agent=alive), vdn_targets(
                team_rewards=batch["rewards"], next_values_per_agent=following, terminated_per_agent=terminated,
                gamma=self.config.gamma)
        live = torch.where(alive.bool(), taken, torch.zeros_like(taken))
        q_tot = self.mixer.online(live.T, batch["state"])
        with torch.no_grad():
            following = (1.0 - terminated.float()) * following
            bootstrap = self.mixer.target(following.T, batch["next_state"])
            y = batch["rewards"].float() + self.config.gamma * (1.0 - batch["terminated"].float()) * bootstrap
        return q_tot, y


def train_team(*, objective: TeamObjective, replay: dict[str, torch.Tensor], config: Any,
               generator: torch.Generator) -> dict[str, Any]:
    """``gradient_steps`` joint steps (none while the replay is below ``learning_starts``), without a host read
    inside the loop (as value_learner.py's ``_train``: the rows' indices reach the device without a wait, the guard
    is decided there, the statistics are read once at the end; each network's ``grad_steps`` counts the steps taken
    or skipped)."""
    rows, params = replay_rows(replay), objective.parameters()
    trained = list(objective.nets.values()) + ([objective.mixer] if objective.mixer else [])
    steps, optimizer = StepRows(keys=VALUE_STATS), _TeamOptimizer(optimizers=[net.optimizer for net in trained])
    if rows >= max(config.learning_starts, 1):
        for index in host_draws(draw=lambda: torch.randint(rows, (config.batch_size,), generator=generator),
                                count=config.gradient_steps, device=replay["rewards"].device):
            loss, stats = objective.terms(batch={name: value[index] for name, value in replay.items()})
            outcome = guarded_step(optimizer=optimizer, params=params, loss=loss, max_grad_norm=config.max_grad_norm)
            steps.add(row=stats, applied=outcome.finite)
            for net in trained:
                net.grad_steps += 1
                if net.grad_steps % config.target_update_period == 0:
                    net.target.load_state_dict(net.online.state_dict())
                    net.refreshes += 1
    means, skipped = steps.read()
    return {**means, "gradient_steps_run": len(steps.rows) - skipped, "nonfinite_steps": skipped,
            "nonfinite": skipped > 0}


class _TeamOptimizer:
    """The team's per-network Adams as the one optimizer ``guarded_step`` steps: Adam is per parameter, so stepping
    them together is one Adam over all the team's parameters (each network keeps its own state for the Store)."""

    def __init__(self, *, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers
        # fused (CUDA): guarded_step hands a non-finite step's found_inf to the kernels; else it undoes the step
        self.defaults = {"fused": all(optimizer.defaults.get("fused") for optimizer in optimizers)}
        self.state = _States(optimizers=optimizers)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [group for optimizer in self.optimizers for group in optimizer.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        found_inf = getattr(self, "found_inf", None)   # set by guarded_step for fused optimizers
        for optimizer in self.optimizers:
            if found_inf is not None:
                optimizer.found_inf = found_inf   # type: ignore[attr-defined]  # read by the fused kernel
            optimizer.step()


class _States:
    """Each parameter's optimizer state, from whichever of the team's optimizers holds it (read-only: a lookup
    never creates an entry, as indexing an optimizer's defaultdict would)."""

    def __init__(self, *, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    def get(self, param: torch.Tensor, default: Any = None) -> Any:
        for optimizer in self.optimizers:
            if param in optimizer.state:
                return optimizer.state[param]
        return default


def publish_items(*, req: TeamLearnerRequest, nets: dict[str, TrainedNet[QPolicy]], mixer: TrainedNet[QMixer] | None,
                  epsilon: float) -> dict[str, Message]:
    """Every policy's (and the mixer's) next version: weights with ε and ``grad_steps``, optimizer, target."""
    items: dict[str, Message] = {}
    for policy, net in nets.items():
        version = req.policy_versions[policy] + 1
        net.online.epsilon.fill_(epsilon)
        items.update(version_items(policy=policy, version=version, model=net.online, optimizer=net.optimizer,
                                   weights_header={"grad_steps": net.grad_steps}))
        items[target_key(policy=policy, version=version)] = model_to_message(model=net.target, version=version)
    if mixer is not None:
        version = req.mixer_version + 1
        weights = model_to_message(model=mixer.online, version=version)
        weights.header["grad_steps"] = mixer.grad_steps
        items[mixer_key(part="weights", version=version)] = weights
        items[mixer_key(part="optim", version=version)] = optimizer_to_message(optimizer=mixer.optimizer,
                                                                               version=version)
        items[mixer_key(part="target", version=version)] = model_to_message(model=mixer.target, version=version)
    return items


class _PolicyView:
    """The team objective as a function of one policy's module (``loss(model, batch)``, what the probe calls)."""

    def __init__(self, *, objective: TeamObjective, policy: str) -> None:
        self.objective, self.policy = objective, policy

    def loss(self, *, model: QPolicy, batch: dict[str, torch.Tensor]) -> LossOutput:
        return self.objective.loss(batch=batch, replace={self.policy: model})


def probe_stats(*, objective: TeamObjective, policy: str, replay: dict[str, torch.Tensor],
                req: TeamLearnerRequest) -> dict[str, Any]:
    """``convexity`` (NaN unless probed), ``probe_rows`` and the probe's extras for ``policy``."""
    extras: dict[str, float] = {}
    if req.probe and replay_rows(replay) > 0:
        request = DEFAULT_PROBE if req.probe is True else ProbeRequest(**req.probe)
        seed = derive_seed(req.seed, zlib.crc32(policy.encode()), req.policy_versions[policy], 3)
        extras = probe_policy(algo=_PolicyView(objective=objective, policy=policy),  # type: ignore[arg-type]
                              model=objective.nets[policy].online, batch=replay, request=request, seed=seed)
    return {"convexity": float(extras.get(HESSIAN_RATIO_KEY, math.nan)), "extras": extras,
            "probe_rows": float(extras.get("probe_rows", 0.0)), "epsilon": float(objective.nets[policy].online.epsilon)}
