"""MARLess's learner function for IQL (MARLess §4.2, Fig. 5a), and the pieces VDN's and QMIX's team learner
(marless/team_learner.py) shares with it: the replay, the networks of a policy version, the algorithm.

* ``value_policy_function`` (the *policy function*, per policy and round, IQL): the off-policy replay is the
  concatenation of the Store values the request lists in ``replay_keys`` (the driver keeps the last
  ``replay_rounds`` rounds' keys, oldest first: ``batch/<policy>/r<k>`` for IQL, ``post/team/r<k>`` for
  VDN and QMIX), cut to the newest ``replay_capacity`` rows. Each of ``gradient_steps`` steps samples
  ``batch_size`` rows uniformly (with replacement) and takes an Adam step on a Huber TD loss,
  Q_p(o, u) against y = r + γ(1 − terminated) Q̄_p(o', argmax_u' Q_p(o', u')) (double DQN).

  Truncation bootstraps (from ``next_obs``, the true final observation); termination does not.
  Target network: ``target/<policy>/<v>`` is the target in effect when ``weights/<policy>/<v>`` was
  published (absent: the weights themselves, e.g. at version 0 or for a policy copied by sharing). It
  becomes a copy of the online network every ``target_update_period`` gradient steps, counted across
  invocations by the weights header's ``grad_steps``. The function publishes ``weights/<p>/<v+1>``
  (ε set from the run's progress, header ``grad_steps``), ``optim/<p>/<v+1>`` and ``target/<p>/<v+1>``,
  every put tagged with the invocation id, and samples with a generator seeded from (seed, policy,
  version, round): a retried attempt recomputes the same values and replaces its own puts. It returns a
  `ValuePolicyResult`.

With ``probe`` (True, or a ProbeRequest header) in the request, the convexity C = −λmax/λmin of the Hessian of
the TD objective (the negated loss) w.r.t. the policy's parameters is probed after the update on the newest round's
rows of the replay (the round's whole batch, nitro/probe.py); else ``convexity`` is NaN. The driver asks only on
rounds a controller reads it (marless/learning.py).
"""

from __future__ import annotations

import copy
import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.base import LossOutput
from nimbus.algos.dqn.loss import td_loss
from nimbus.algos.multiagent.config import IQLConfig, QMIXConfig, ValueConfigBase, VDNConfig
from nimbus.algos.multiagent.iql import IQL, NEXT_ACTION_MASK, QPolicy, ValueAlgorithm, iql_targets
from nimbus.algos.multiagent.qmix import QMIX
from nimbus.algos.multiagent.vdn import VDN
from nimbus.algos.step import guarded_step
from nimbus.analysis.hessian import HESSIAN_RATIO_KEY
from nimbus.data.codec import Message
from nimbus.data.request import WireRequest
from nimbus.data.store import KeyNotFound, Store
from nimbus.data.stores import function_store, put_all
from nimbus.envs.spaces import EnvSpaces
from nimbus.marless.device_loop import StepRows, host_draws
from nimbus.marless.results import MarlessResult
from nimbus.marless.rows import live_index
from nimbus.models.weights import load_model, load_optimizer, load_version, model_to_message, version_items
from nimbus.nitro.probe import probe_policy
from nimbus.roles.actor import derive_seed
from nimbus.roles.probe import ProbeRequest
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.devices import place, torch_device

VALUE_HEADER = "value_learner"
TEAM = "team"
DEFAULT_PROBE = ProbeRequest(subset_size=None, max_iterations=30, tolerance=1e-3)   # as marless/learner.py
VALUE_STATS = ("policy_loss", "q_mean", "td_abs")   # a TD step's statistics, in the order ``terms`` gives them


def target_key(*, policy: str, version: int) -> str:
    return f"target/{policy}/{version}"


def team_post_key(*, round: int) -> str:
    return f"post/{TEAM}/r{round}"


def replay_rounds(*, capacity_rows: int, rows_per_round: int) -> int:
    """How many rounds' batches the driver keeps in ``replay_keys`` to fill ``capacity_rows`` (at least 1)."""
    return max(1, math.ceil(capacity_rows / max(1, rows_per_round)))


def spaces_header(*, spaces: EnvSpaces) -> dict[str, Any]:
    """An agent's observation and (Discrete) action space as JSON-able fields for a request header."""
    obs, action = spaces.observation, spaces.action
    if not isinstance(obs, gym.spaces.Box) or not isinstance(action, gym.spaces.Discrete):
        raise TypeError(f"a value learner reads a Box observation and a Discrete action, got {obs} and {action}")
    return {"obs_shape": list(obs.shape), "obs_dtype": np.dtype(obs.dtype).name, "num_actions": int(action.n)}


def spaces_from_header(header: dict[str, Any]) -> EnvSpaces:
    dtype = np.dtype(header["obs_dtype"])
    low, high = (0, 255) if dtype == np.uint8 else (-np.inf, np.inf)
    return EnvSpaces(observation=gym.spaces.Box(low, high, tuple(header["obs_shape"]), dtype),
                     action=gym.spaces.Discrete(header["num_actions"]))


@dataclass(frozen=True)
class ValueLearnerRequest(WireRequest, header=VALUE_HEADER, affinity="learner-{policy}"):
    policy: str                       # the policy this invocation trains
    round: int
    algo: dict[str, Any]              # IQLConfig as a dict
    agents: dict[str, int]            # the agents mapped to ``policy`` → index into all_agents (informational)
    all_agents: Sequence[str]         # every agent, sorted
    agent_policy: dict[str, str]      # agent → policy for every agent
    policy_versions: dict[str, int]   # the version of each policy to read; ``policy``'s is the one updated
    replay_keys: Sequence[str]        # the replay: Store keys of the last rounds' batches, oldest first
    spaces: dict[str, dict[str, Any]]  # policy → spaces_header(...), for every policy in agent_policy
    seed: int
    progress: float                   # 0..1 through the run: ε's schedule
    torch_threads: int = 1
    probe: bool | dict[str, Any] | None = False   # True (DEFAULT_PROBE) or a ProbeRequest header: convexity


@dataclass(frozen=True)
class ValuePolicyResult(MarlessResult):
    """What IQL's policy function returns (the weights, optimizer and target are in the Store under version
    ``policy_version``)."""

    STATS: ClassVar[tuple[str, ...]] = VALUE_STATS   # each the mean over the steps taken (NaN if none)
    policy: str
    policy_version: int         # the version the update published
    stats: dict[str, float]
    grad_steps: int             # the policy's gradient steps so far, across rounds: the target's refresh clock
    gradient_steps_run: int     # this update's steps taken
    target_refreshes: int       # this update's target copies
    nonfinite_steps: int        # steps a non-finite loss or gradient skipped (train.max_nonfinite_losses)
    nonfinite: bool             # nonfinite_steps > 0
    epsilon: float              # the published weights' exploration rate
    replay_rows: int
    convexity: float            # C = −λmax/λmin of the TD objective after the update; NaN unprobed
    extras: dict[str, float]    # the probe's readings (nitro/probe.py); {} unprobed
    probe_rows: float           # the rows the probe read; 0 unprobed
    policy_s: float
    device: str


def value_policy_function(*, context: FunctionContext, request: Message) -> Message:
    req = ValueLearnerRequest.from_message(request)
    started = time.perf_counter()
    store, algo, device = value_invocation(context=context, request=request, config=req.algo,
                                           torch_threads=req.torch_threads)
    config = algo.config
    version = req.policy_versions[req.policy]
    spaces = spaces_from_header(req.spaces[req.policy])
    online, target, optimizer, grad_steps = own_networks(store=store, algo=algo, spaces=spaces, policy=req.policy,
                                                          version=version, device=device)
    replay = load_replay(context=context, store=store, keys=req.replay_keys, capacity=config.replay_capacity,
                     device=device)
    if algo.joint:
        raise ValueError(f"value_policy_function runs iql; {algo.name} trains the team jointly "
                         "(marless/team_learner.py)")
    objective = _Objective(config=config, target=target)
    generator = torch.Generator().manual_seed(derive_seed(req.seed, zlib.crc32(req.policy.encode()), version,
                                                          req.round))
    stats = _train(online=online, target=target, optimizer=optimizer, objective=objective, replay=replay,
                   config=config, grad_steps=grad_steps, generator=generator)
    online.epsilon.fill_(algo.epsilon_at(progress=req.progress))
    new_version = version + 1
    put_all(store=store, writer=context.invocation_id, items={
        **version_items(policy=req.policy, version=new_version, model=online, optimizer=optimizer,
                        weights_header={"grad_steps": stats["grad_steps"]}),
        target_key(policy=req.policy, version=new_version): model_to_message(model=target, version=new_version),
    })
    newest = newest_rows(context=context, keys=req.replay_keys, device=device) if req.probe else {}
    extras = _probe(objective=objective, online=online, replay=newest, req=req, version=version)
    return ValuePolicyResult(
        policy=req.policy, policy_version=new_version, stats={name: stats[name] for name in VALUE_STATS},
        grad_steps=stats["grad_steps"], gradient_steps_run=stats["gradient_steps_run"],
        target_refreshes=stats["target_refreshes"], nonfinite_steps=stats["nonfinite_steps"],
        nonfinite=stats["nonfinite"], epsilon=float(online.epsilon), replay_rows=replay_rows(replay),
        convexity=float(extras.get(HESSIAN_RATIO_KEY, math.nan)), extras=extras,
        probe_rows=float(extras.get("probe_rows", 0.0)), policy_s=time.perf_counter() - started,
        device=str(device)).wire_message()


# --- helpers ---


def value_invocation(*, context: FunctionContext, request: Message, config: dict[str, Any],
                     torch_threads: int) -> tuple[Store, ValueAlgorithm, torch.device]:
    """What a value-learner invocation (one policy's or the team's) starts from: the Store, the algorithm
    (``value_algo``) and the device, the lease's or the CPU without a pool, with the warm replay and networks moved
    onto it (they left it at the last lease's end)."""
    torch.set_num_threads(torch_threads)
    store = function_store(header=request.header)
    algo = value_algo(context=context, config=config, store=store)
    device = torch_device(leased=context.device, requested="cpu")
    place(cache=context.cache, device=device)
    return store, algo, device


def value_algo(*, context: FunctionContext, config: dict[str, Any], store: Store) -> ValueAlgorithm:
    """The algorithm for ``config``; a new config or another run's Store also drops the cached replay and networks."""
    if context.cache.get("value_algo_config") != config or context.cache.get("value_store") is not store:
        for key in ("value_replay_keys", "value_replay_parts", "value_replay"):
            context.cache.pop(key, None)
        builders: dict[str, tuple[type[ValueAlgorithm], type[ValueConfigBase]]] = {
            "iql": (IQL, IQLConfig), "vdn": (VDN, VDNConfig), "qmix": (QMIX, QMIXConfig)}
        if config["name"] not in builders:
            raise ValueError(f"the value learners run {', '.join(builders)}, not {config['name']!r}")
        algo_cls, config_cls = builders[config["name"]]
        algo: ValueAlgorithm = algo_cls(config=config_cls.model_validate(config))
        context.cache.update(value_algo_config=config, value_algo=algo, value_store=store)
    return context.cache["value_algo"]


def own_networks(*, store: Store, algo: ValueAlgorithm, spaces: EnvSpaces, policy: str, version: int,
                  device: torch.device) -> tuple[QPolicy, QPolicy, torch.optim.Optimizer, int]:
    """(online, target, optimizer, grad_steps) of ``policy`` at ``version``, fresh modules on ``device`` (the update
    mutates them). Version 0, or a policy copied by sharing, has no optimizer state (a fresh Adam) and no target
    (the target starts as the weights)."""
    online = algo.make_policy(spaces=spaces).to(device)
    optimizer = algo.make_optimizer(model=online)
    loaded = load_version(store=store, policy=policy, version=version, model=online, optimizer=optimizer,
                          optimizer_may_be_missing=True)
    target = copy.deepcopy(online).requires_grad_(False)
    try:
        load_model(model=target, message=store.get(key=target_key(policy=policy, version=version)))
    except KeyNotFound:
        pass
    return online, target, optimizer, int(loaded.header.get("grad_steps", 0))


def load_optimizer_if_any(*, store: Store, optimizer: torch.optim.Optimizer, key: str) -> None:
    try:
        load_optimizer(optimizer=optimizer, message=store.get(key=key))
    except KeyNotFound:
        pass   # version 0 (or a policy copied by sharing): a fresh Adam


def load_replay(*, context: FunctionContext, store: Store, keys: Sequence[str], capacity: int,
            device: torch.device) -> dict[str, torch.Tensor]:
    """The replay: the values under ``keys`` concatenated in order, the newest ``capacity`` rows kept."""
    if context.cache.get("value_replay_keys") != list(keys):
        held: dict[str, dict[str, np.ndarray]] = context.cache.get("value_replay_parts", {})
        parts = {key: held[key] if key in held else {name: np.array(value) for name, value in
                                                     store.get(key=key).arrays.items()} for key in keys}
        joined = join_replay(parts=[parts[key] for key in keys], capacity=capacity)
        context.cache.update(value_replay_keys=list(keys), value_replay_parts=parts,
                             value_replay={name: torch.as_tensor(value, device=device)
                                           for name, value in joined.items()})
    return context.cache["value_replay"]


def join_replay(*, parts: Sequence[dict[str, np.ndarray]], capacity: int) -> dict[str, np.ndarray]:
    """The rounds' rows concatenated in order (oldest first), keeping the newest ``capacity`` rows and the
    columns every part has."""
    if not parts:
        return {}
    names = [name for name in parts[0] if all(name in part for part in parts)]
    joined = {name: np.concatenate([part[name] for part in parts]) for name in names}
    live = live_index(arrays=joined)   # IQL: an agent's padding rows never enter the replay
    if live is not None:
        joined = {name: value[live] for name, value in joined.items()}
    return {name: value[-capacity:] for name, value in joined.items()}


def newest_rows(*, context: FunctionContext, keys: Sequence[str], device: torch.device) -> dict[str, torch.Tensor]:
    """The newest round's rows of the replay (live ones), what the convexity probe reads: that round's whole batch,
    as the on-policy probe reads its round's batch."""
    if not keys:
        return {}
    newest = join_replay(parts=[context.cache["value_replay_parts"][keys[-1]]], capacity=2 ** 62)
    return {name: torch.as_tensor(value, device=device) for name, value in newest.items()}


def replay_rows(replay: dict[str, torch.Tensor]) -> int:
    return int(replay["rewards"].shape[0]) if "rewards" in replay else 0


class _Objective:
    """IQL's TD loss of one policy's online network on a batch of replay rows, as ``loss(model, batch)`` so the
    Hessian probe can use it too."""

    def __init__(self, *, config: Any, target: QPolicy) -> None:
        self.config, self.target = config, target

    def loss(self, *, model: QPolicy, batch: dict[str, torch.Tensor]) -> LossOutput:
        loss, stats = self.terms(model=model, batch=batch)
        return LossOutput(loss=loss, stats=dict(zip(VALUE_STATS[1:], stats[1:].tolist(), strict=True)))

    def terms(self, *, model: QPolicy, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss and its statistics (``VALUE_STATS`` order, detached), on the device: no host read."""
        c = self.config
        with torch.no_grad():
            q_next_target = self.target.q(batch["next_obs"])
            q_next_online = model.q(batch["next_obs"]) if c.double_q else q_next_target
            y = iql_targets(rewards=batch["rewards"], terminated=batch["terminated"], q_next_online=q_next_online,
                            q_next_target=q_next_target, gamma=c.gamma, double_q=c.double_q,
                            next_action_mask=batch.get(NEXT_ACTION_MASK))
        out = td_loss(q_values=model.q(batch["obs"]), actions=batch["actions"], targets=y, huber_delta=c.huber_delta)
        return out.loss, torch.stack([out.loss.detach(), out.q_taken.mean(), out.td_errors.abs().mean()])


def _train(*, online: QPolicy, target: QPolicy, optimizer: torch.optim.Optimizer, objective: _Objective,
           replay: dict[str, torch.Tensor], config: Any, grad_steps: int, generator: torch.Generator) -> dict[str, Any]:
    """``gradient_steps`` uniform-minibatch steps (none while the replay is below ``learning_starts``), without a
    host read inside the loop: the rows' indices reach the device without a wait (``host_draws``), the non-finite
    guard is decided there (a skipped step keeps the weights and Adam's state), the statistics are read once.
    ``grad_steps`` counts the steps taken or skipped, the clock of the target's refresh (so the refresh needs no read
    either)."""
    rows, refreshes = replay_rows(replay), 0
    steps, params = StepRows(keys=VALUE_STATS), list(online.q.parameters())
    if rows >= max(config.learning_starts, 1):
        for index in host_draws(draw=lambda: torch.randint(rows, (config.batch_size,), generator=generator),
                                count=config.gradient_steps, device=replay["rewards"].device):
            loss, stats = objective.terms(model=online, batch={name: value[index] for name, value in replay.items()})
            outcome = guarded_step(optimizer=optimizer, params=params, loss=loss, max_grad_norm=config.max_grad_norm)
            steps.add(row=stats, applied=outcome.finite)
            grad_steps += 1
            if grad_steps % config.target_update_period == 0:
                target.load_state_dict(online.state_dict())
                refreshes += 1
    means, skipped = steps.read()
    return {**means, "grad_steps": grad_steps, "gradient_steps_run": len(steps.rows) - skipped,
            "target_refreshes": refreshes, "nonfinite_steps": skipped, "nonfinite": skipped > 0}


def _probe(*, objective: _Objective, online: QPolicy, replay: dict[str, torch.Tensor], req: ValueLearnerRequest,
           version: int) -> dict[str, float]:
    if not req.probe or replay_rows(replay) == 0:
        return {}
    request = DEFAULT_PROBE if req.probe is True else ProbeRequest(**req.probe)
    return probe_policy(algo=objective, model=online, batch=replay, request=request,  # type: ignore[arg-type]
                        seed=derive_seed(req.seed, zlib.crc32(req.policy.encode()), version, 3))
