"""The on-policy multi-agent learner functions (MARLess §4.2, Fig. 5): post-processing, critic, policy.

A policy's round runs the algorithm's roles in order, each its own invocation (a function kind of its own
in the ledger): MAPPO ``postprocess`` → ``critic`` → ``policy``; IPPO ``critic`` → ``policy``. They share
one request (`MarlessLearnerRequest`) and talk through the Store:

- ``postprocess_function`` (MAPPO) reads ``batch/<policy>/r<k>`` and puts ``post/<policy>/r<k>``:
  ``critic_obs`` = state ⊕ one-hot(agent_index) and ``next_critic_obs`` = next_state ⊕ one-hot; returns a
  `PostprocessResult`.
- ``critic_function`` computes V(x) and V(x') with critic version v (x = own obs for IPPO, the post-processed
  input for MAPPO), GAE per agent segment (``cut`` ends a segment; ``terminated`` bootstraps 0, a truncation
  bootstraps V(next_obs)), puts ``adv/<policy>/r<k>`` (advantages, returns), then fits the critic on the
  returns (epochs × minibatches) and puts ``critic/<policy>/<v+1>`` (network + optimizer state); returns a
  `CriticResult`.
- ``policy_function`` runs PPO's clipped surrogate on the advantages (epochs × minibatches), puts
  ``weights/<policy>/<v+1>`` and ``optim/<policy>/<v+1>``, and, when the request asks (``probe``), measures
  the convexity C = −λmax/λmin of the policy objective's Hessian on the whole batch's live rows (nitro/probe.py,
  analysis/hessian.py); the driver asks only on rounds a controller reads it (marless/learning.py). Returns a
  `PolicyResult`.

With an env that gives action masks, the batch's ``action_mask`` column goes into the surrogate and the probe: the
log-prob and entropy are those of the masked distribution the actor sampled from (models/distributions.py).

Padding rows (``alive`` False: an agent that finished before the others, marless/rows.py) are masked out: their
advantages and returns are 0, and neither the value fit, the value normalisation, the surrogate nor the probe
sees them.

Every put is tagged with the invocation id, so a retried invocation may redo its puts (data/store.py).
A non-finite loss or gradient skips that minibatch (the weights are kept), as ppo_update does; the results count the
skipped steps (``critic_nonfinite_steps``, ``nonfinite_steps``), which the driver's ``train.max_nonfinite_losses``
guard reads (marless/workflow.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from nimbus.algos.gae import compute_gae
from nimbus.algos.multiagent import multiagent_algo_from_dict
from nimbus.algos.multiagent.messages import critic_to_message, load_critic
from nimbus.algos.multiagent.ppo import ACTION_MASK, POLICY_STATS, centralised_inputs
from nimbus.algos.ppo.learner import scheduled
from nimbus.algos.ppo.loss import explained_variance, value_loss
from nimbus.algos.step import guarded_step
from nimbus.analysis.hessian import HESSIAN_RATIO_KEY
from nimbus.data.codec import Message
from nimbus.data.request import WireRequest
from nimbus.data.store import Store
from nimbus.data.stores import function_store, put_all
from nimbus.envs.parallel import agent_spaces, global_state, make_parallel_env
from nimbus.envs.spaces import EnvSpaces
from nimbus.marless.agent_id import with_agent_id
from nimbus.marless.device_loop import StepRows, host_draws
from nimbus.marless.results import MarlessResult
from nimbus.marless.rows import live_index
from nimbus.models.weights import load_version, version_items
from nimbus.nitro.probe import probe_policy
from nimbus.roles.actor import derive_seed
from nimbus.roles.probe import ProbeRequest
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.devices import PLACED_KEY, place, torch_device
from nimbus.runtime.faults import fault_point

# the whole batch: 256 rows were too noisy for Nitro's scaler, which moved to the whole batch
DEFAULT_PROBE = ProbeRequest(subset_size=None, max_iterations=30, tolerance=1e-3)


@dataclass(frozen=True)
class MarlessLearnerRequest(WireRequest, header="marless_learner", affinity="learner-{policy}"):
    env_id: str
    env_kwargs: dict[str, Any]
    algo: dict[str, Any]
    policy: str
    round: int
    agents: dict[str, int]          # the agents mapped to this policy → index into all_agents
    all_agents: Sequence[str]       # sorted possible agents
    batch_key: str                  # batch/<policy>/r<k>
    weights_version: int            # the policy function reads it and publishes weights_version + 1
    critic_version: int             # the critic function reads it and publishes critic_version + 1
    seed: int
    progress: float = 0.0           # 0..1 through the run, for linear schedules
    probe: bool | dict[str, Any] = False   # True or a ProbeRequest header: measure the convexity after the update
    env_imports: Sequence[str] = ()
    agent_id: bool = False                 # the networks read obs ⊕ one-hot(agent) (marless/agent_id.py)

    def key(self, *, prefix: str) -> str:
        """``<prefix>/<policy>/r<round>`` (post, adv)."""
        return f"{prefix}/{self.policy}/r{self.round}"


@dataclass(frozen=True)
class PostprocessResult(MarlessResult):
    """What MAPPO's post-processing function returns (the critic inputs themselves are in the Store)."""

    post_key: str            # post/<policy>/r<k>: critic_obs, next_critic_obs
    rows: int
    postprocess_s: float


@dataclass(frozen=True)
class CriticResult(MarlessResult):
    """What a critic function returns (the advantages are in the Store under ``adv_key``, the fitted critic under
    ``critic/<policy>/<critic_version>``)."""

    critic_version: int            # the version the fit published
    value_loss: float              # the mean over the steps taken (NaN if none)
    critic_nonfinite_steps: int    # steps a non-finite loss or gradient skipped (train.max_nonfinite_losses)
    explained_variance: float
    adv_key: str
    rows: int                      # the live rows the critic fitted
    dead_rows: int                 # padding rows left out (marless/rows.py)
    device: str
    critic_s: float


@dataclass(frozen=True)
class PolicyResult(MarlessResult):
    """What a policy function returns (the weights are in the Store under ``weights/<policy>/<policy_version>``)."""

    STATS: ClassVar[tuple[str, ...]] = POLICY_STATS   # each the mean over the steps taken (NaN if none)
    policy_version: int         # the version the update published
    stats: dict[str, float]
    nonfinite_steps: int        # steps a non-finite loss or gradient skipped (train.max_nonfinite_losses)
    convexity: float            # C = −λmax/λmin of the updated policy's objective; NaN unprobed
    extras: dict[str, float]    # the probe's readings (nitro/probe.py); {} unprobed
    probe_rows: float           # the rows the probe read; 0 unprobed
    rows: int                   # the live rows the surrogate read
    dead_rows: int              # padding rows left out (marless/rows.py)
    policy_s: float
    device: str


ROLE_RESULTS: dict[str, type[MarlessResult]] = {   # what each role's function returns (marless/learning.py reads it)
    "postprocess": PostprocessResult, "critic": CriticResult, "policy": PolicyResult}


def postprocess_function(*, context: FunctionContext, request: Message) -> Message:
    req = MarlessLearnerRequest.from_message(request)
    started = time.perf_counter()
    store = function_store(header=request.header)
    batch = store.get(key=req.batch_key).arrays
    num_agents = len(req.all_agents)
    index = np.asarray(batch["agent_index"])
    post = {"critic_obs": centralised_inputs(state=batch["state"], agent_index=index, num_agents=num_agents),
            "next_critic_obs": centralised_inputs(state=batch["next_state"], agent_index=index, num_agents=num_agents)}
    store.put(key=req.key(prefix="post"), message=Message(header={"round": req.round}, arrays=post),
              writer=context.invocation_id)
    return PostprocessResult(post_key=req.key(prefix="post"), rows=int(len(index)),
                             postprocess_s=time.perf_counter() - started).wire_message()


def critic_function(*, context: FunctionContext, request: Message) -> Message:
    started = time.perf_counter()
    req, state, store = _invocation(context=context, request=request)
    algo, critic = state["algo"], state["critic"]
    optimizer = algo.make_optimizer(model=critic, lr=algo.config.critic_lr)
    load_critic(critic=critic, optimizer=optimizer,
                message=store.get(key=f"critic/{req.policy}/{req.critic_version}"))
    batch = store.get(key=req.batch_key).arrays
    device = state["device"]
    inputs, next_inputs = _critic_inputs(algo=algo, store=store, req=req, batch=batch, device=device)
    with torch.no_grad():
        values, next_values = critic.values(inputs), critic.values(next_inputs)
    rows = {name: torch.as_tensor(np.array(batch[name]), device=device) for name in ("terminated", "cut")}
    advantages, returns = compute_gae(
        rewards=torch.as_tensor(np.array(batch["rewards"], np.float32), device=device), values=values,
        next_values=next_values, **rows, gamma=algo.config.gamma, gae_lambda=algo.config.gae_lambda)
    live = live_index(arrays=batch)   # a padding row is cut and terminated: it never enters a live row's GAE
    if live is not None:
        advantages, returns = _zero_dead(advantages, live=live), _zero_dead(returns, live=live)
    store.put(key=req.key(prefix="adv"), writer=context.invocation_id,
              message=Message(header={"round": req.round}, arrays={"advantages": advantages.cpu().numpy(),
                                                                    "returns": returns.cpu().numpy()}))
    if live is not None:   # the critic fits, normalises and is scored on the live rows only
        inputs, values, returns = (x[torch.as_tensor(live, device=device)] for x in (inputs, values, returns))
    if algo.config.value_norm:
        critic.return_norm.update(returns)
    fit, skipped = _fit_critic(algo=algo, critic=critic, optimizer=optimizer, inputs=inputs, req=req,
                               values=critic.return_norm.normalize(values),
                               returns=critic.return_norm.normalize(returns))
    new_version = req.critic_version + 1
    store.put(key=f"critic/{req.policy}/{new_version}", writer=context.invocation_id,
              message=critic_to_message(critic=critic, optimizer=optimizer, version=new_version))
    return CriticResult(critic_version=new_version, value_loss=fit, critic_nonfinite_steps=skipped,
                        explained_variance=explained_variance(values=values, returns=returns),
                        adv_key=req.key(prefix="adv"), rows=int(len(returns)),
                        dead_rows=int(len(batch["rewards"]) - len(returns)), device=str(device),
                        critic_s=time.perf_counter() - started).wire_message()


def policy_function(*, context: FunctionContext, request: Message) -> Message:
    started = time.perf_counter()
    req, state, store = _invocation(context=context, request=request)
    algo, model = state["algo"], state["policy"]
    optimizer = _load_policy(store=store, req=req, algo=algo, model=model)
    batch, dead_rows = _policy_batch(store=store, req=req, device=state["device"])
    stats, skipped = _fit_policy(algo=algo, model=model, optimizer=optimizer, batch=batch, req=req)
    new_version = req.weights_version + 1
    put_all(store=store, writer=context.invocation_id,
            items=version_items(policy=req.policy, version=new_version, model=model, optimizer=optimizer))
    fault_point(name="marless.policy.published")
    extras = _probe(algo=algo, model=model, batch=batch, req=req)
    return PolicyResult(policy_version=new_version, stats=stats, nonfinite_steps=skipped,
                        convexity=extras.get(HESSIAN_RATIO_KEY, math.nan), extras=extras,
                        probe_rows=float(extras.get("probe_rows", 0.0)), rows=int(batch["obs"].shape[0]),
                        dead_rows=dead_rows, policy_s=time.perf_counter() - started,
                        device=str(state["device"])).wire_message()


def _invocation(*, context: FunctionContext, request: Message) -> tuple[MarlessLearnerRequest, dict[str, Any], Store]:
    """What a critic or policy invocation starts from: its request, the warm state for its policy (``_state``) and
    the Store."""
    req = MarlessLearnerRequest.from_message(request)
    return req, _state(context=context, req=req), function_store(header=request.header)


def _state(*, context: FunctionContext, req: MarlessLearnerRequest) -> dict[str, Any]:
    """The algorithm and a policy and critic network shaped for this policy's agents, cached per (algo, env, policy
    shape); the weights are loaded from the Store by each invocation."""
    cache = context.cache
    agent = next(iter(sorted(req.agents, key=req.agents.__getitem__)))
    env_key = (req.env_id, dict(req.env_kwargs), list(req.env_imports))
    if cache.get("marless_algo") != req.algo or cache.get("marless_env") != env_key:
        torch.set_num_threads(1)
        env = make_parallel_env(env_id=req.env_id, seed=0, kwargs=req.env_kwargs, imports=req.env_imports)
        env.reset()
        env_spaces = agent_spaces(env=env)
        state_dim = int(global_state(env=env).shape[0])
        env.close()
        cache.clear()
        cache.update(marless_algo=req.algo, marless_env=env_key, algo=multiagent_algo_from_dict(algo=req.algo),
                     spaces=env_spaces, state_dim=state_dim, nets={})
    spaces: dict[str, EnvSpaces] = dict(cache["spaces"])
    if req.agent_id:
        spaces[agent] = with_agent_id(spaces=spaces[agent], num_agents=len(req.all_agents))
    signature = (str(spaces[agent].observation), str(spaces[agent].action), len(req.all_agents))
    nets = cache["nets"]
    if signature not in nets:
        algo = cache["algo"]
        nets[signature] = {"policy": algo.make_policy(spaces=spaces[agent]),
                           "critic": algo.make_critic(spaces=spaces[agent], state_dim=cache["state_dim"],
                                                      num_agents=len(req.all_agents))
                           if hasattr(algo, "make_critic") else None}
        cache.pop(PLACED_KEY, None)  # the new nets are on the CPU
    device = torch_device(leased=context.device, requested="cpu")  # the lease's device; the CPU without a pool
    place(cache=cache, device=device)  # the warm nets left the device at the last lease's end
    return {"algo": cache["algo"], "device": device, **nets[signature]}


def _critic_inputs(*, algo: Any, store: Store, req: MarlessLearnerRequest, batch: dict[str, np.ndarray],
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    arrays, names = (store.get(key=req.key(prefix="post")).arrays, ("critic_obs", "next_critic_obs")) \
        if algo.centralised else (batch, ("obs", "next_obs"))
    name, next_name = names
    return (torch.as_tensor(np.array(arrays[name], np.float32), device=device),
            torch.as_tensor(np.array(arrays[next_name], np.float32), device=device))


def _minibatches(*, rows: int, num_minibatches: int, generator: torch.Generator, num_epochs: int,
                 device: torch.device) -> Iterator[torch.Tensor]:
    """Every epoch's minibatches: slices of a random order of the rows, drawn by ``generator`` as always and put on
    the learner's device without a wait inside the loop (marless/device_loop.py ``host_draws``)."""
    size = max(1, math.ceil(rows / num_minibatches))
    for order in host_draws(draw=lambda: torch.randperm(rows, generator=generator), count=num_epochs, device=device):
        yield from (order[start:start + size] for start in range(0, rows, size))


def _fit_critic(*, algo: Any, critic: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor,
                values: torch.Tensor, returns: torch.Tensor, req: MarlessLearnerRequest) -> tuple[float, int]:
    """Epochs × minibatches of the (optionally clipped) value loss on the critic's own units (standardised with
    ``value_norm``); the mean loss over the steps taken and how many steps a non-finite loss or gradient skipped.
    No host read inside the loop: the guard is decided on the device, the losses are read once at the end."""
    config = algo.config
    _set_lr(optimizer=optimizer, lr=scheduled(value=config.critic_lr, schedule=config.lr_schedule,
                                              progress=req.progress))
    generator = torch.Generator().manual_seed(derive_seed(req.seed, req.round, 4))
    params, steps = list(critic.parameters()), StepRows(keys=("value_loss",))
    for rows in _minibatches(rows=len(returns), num_minibatches=config.num_minibatches, generator=generator,
                             num_epochs=config.num_epochs, device=returns.device):
        loss = value_loss(new_values=critic(inputs[rows]), old_values=values[rows], returns=returns[rows],
                          vf_clip=config.vf_clip)
        outcome = guarded_step(optimizer=optimizer, params=params, loss=loss, max_grad_norm=config.max_grad_norm)
        steps.add(row=loss.detach(), applied=outcome.finite)
    means, skipped = steps.read()
    return means["value_loss"], skipped


def _load_policy(*, store: Store, req: MarlessLearnerRequest, algo: Any, model: nn.Module) -> torch.optim.Optimizer:
    optimizer = algo.make_optimizer(model=model, lr=algo.config.lr)
    # version 0, or a policy just split off its group, has no optimizer state: a fresh optimizer
    load_version(store=store, policy=req.policy, version=req.weights_version, model=model, optimizer=optimizer,
                 optimizer_may_be_missing=True)
    return optimizer


def _policy_batch(*, store: Store, req: MarlessLearnerRequest,
                  device: torch.device) -> tuple[dict[str, torch.Tensor], int]:
    """The surrogate's rows (the live ones: padding rows are dropped) and how many padding rows were dropped."""
    batch = store.get(key=req.batch_key).arrays
    adv = store.get(key=req.key(prefix="adv")).arrays
    arrays = {"obs": np.array(batch["obs"], np.float32), "actions": np.array(batch["actions"]),
              "logp": np.array(batch["logp"], np.float32), "rewards": np.array(batch["rewards"], np.float32),
              "advantages": np.array(adv["advantages"])}
    if ACTION_MASK in batch:   # the masked distribution the actors sampled from (envs/masks.py)
        arrays[ACTION_MASK] = np.array(batch[ACTION_MASK], dtype=bool)
    live = live_index(arrays=batch)
    if live is not None:
        arrays = {name: value[live] for name, value in arrays.items()}
    dead = 0 if live is None else len(batch["rewards"]) - len(live)
    return {name: torch.as_tensor(value, device=device) for name, value in arrays.items()}, dead


def _zero_dead(values: torch.Tensor, *, live: np.ndarray) -> torch.Tensor:
    """``values`` with every row outside ``live`` set to 0."""
    mask = torch.zeros(values.shape[0], dtype=torch.bool, device=values.device)
    mask[torch.as_tensor(live, device=values.device)] = True
    return torch.where(mask, values, torch.zeros_like(values))


def _fit_policy(*, algo: Any, model: nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
                req: MarlessLearnerRequest) -> tuple[dict[str, float], int]:
    """PPO epochs × minibatches; the mean of each loss statistic over the steps taken (NaN if none) and how many
    steps a non-finite loss or gradient skipped. No host read inside the loop."""
    config = algo.config
    _set_lr(optimizer=optimizer, lr=scheduled(value=config.lr, schedule=config.lr_schedule, progress=req.progress))
    generator = torch.Generator().manual_seed(derive_seed(req.seed, req.round, 5))
    params, steps = list(model.parameters()), StepRows(keys=POLICY_STATS)
    for rows in _minibatches(rows=batch["obs"].shape[0], num_minibatches=config.num_minibatches, generator=generator,
                             num_epochs=config.num_epochs, device=batch["obs"].device):
        loss, stats = algo.policy_terms(model=model, batch={key: value[rows] for key, value in batch.items()},
                                        clip_coef=config.clip_coef)
        outcome = guarded_step(optimizer=optimizer, params=params, loss=loss, max_grad_norm=config.max_grad_norm)
        steps.add(row=stats, applied=outcome.finite)
    return steps.read()


def _set_lr(*, optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def _probe(*, algo: Any, model: nn.Module, batch: dict[str, torch.Tensor],
           req: MarlessLearnerRequest) -> dict[str, float]:
    """The convexity probe of the updated policy when the request asks; {} otherwise."""
    if not req.probe:
        return {}
    request = DEFAULT_PROBE if req.probe is True else ProbeRequest(**req.probe)
    return probe_policy(algo=algo, model=model, batch=batch, request=request,
                        seed=derive_seed(req.seed, req.round, 6))
