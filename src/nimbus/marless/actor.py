"""The multi-agent actor function: one fragment of ``num_envs`` PettingZoo Parallel envs, every agent acting
with its policy's weights (MARLess §4.1: one actor feeds several policies).

Each agent acts with the policy the request's agent→policy map gives it; inference is batched per policy
(all envs × all agents of that policy in one forward pass). Like onpolicy/actor.py, a warm worker keeps the
policy networks and, per actor rank, an *env slot* (the envs, their current observations and global states,
running per-agent episode returns) in ``context.cache``, so episodes continue across rounds. The driver sends
``slot_seq``; a slot whose sequence or env count does not match is restored from the state the request carries
(``actors.restore_slots``) or rebuilt with a fresh seed (marless/slot.py).

Result arrays, per agent and prefixed ``<agent>/``, R = num_envs × fragment_steps rows, env-major then time
(row = e × T + t): ``obs``, ``next_obs`` (the final observation at an episode's end, not the reset one),
``actions``, ``logp`` (on-policy algorithms), ``rewards``, ``terminated``, ``truncated``, ``cut`` (terminated |
truncated | last step of the fragment), ``alive`` (the agent acted in this row), and, for an agent whose env gives
action masks (envs/masks.py), ``action_mask`` (R × n bool: the legal actions it sampled among; the policy's
Categorical gives the others probability 0, and ``logp`` is of that masked distribution) and, for the value-based
algorithms, ``next_action_mask`` (the legal actions of ``next_obs``, what their TD target maximises over; all allowed
where the env gave none, e.g. after the agent's last step). Shared, when the algorithm is
centralised: ``state``, ``next_state``. An env ends its episode when no agent is live; an agent that finished
before the others gets padding rows (its last observation, action 0, reward 0, terminated, ``alive`` False)
until the env resets, which every learner masks out (marless/rows.py).

The header is a `MultiAgentActorResult`, and the env slot's state beside it when the request asks
(``snapshot``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.multiagent import multiagent_algo_from_dict
from nimbus.algos.multiagent.iql import NEXT_ACTION_MASK
from nimbus.algos.multiagent.ppo import ACTION_MASK
from nimbus.data.codec import Message
from nimbus.data.result import WireResult
from nimbus.data.stores import function_store
from nimbus.envs.masks import masks_from
from nimbus.envs.parallel import agent_spaces, global_state, make_parallel_env
from nimbus.envs.slot_state import SLOT_META, slot_state_from
from nimbus.envs.spaces import EnvSpaces
from nimbus.marless.agent_id import append_agent_id, with_agent_id
from nimbus.marless.slot import MultiAgentSlot, capture_ma_slot, env_slot
from nimbus.models.distributions import clip_action
from nimbus.models.weights import load_model
from nimbus.roles.actor import FragmentRequest, derive_seed
from nimbus.runtime.base import FunctionContext


@dataclass(frozen=True)
class MultiAgentActorRequest(FragmentRequest, header="marless_actor", affinity="actor-{actor_rank}"):
    agent_policy: dict[str, str]    # agent → policy
    weights_keys: dict[str, str]    # policy → weights/<policy>/<v>
    algo: dict[str, Any]
    env_imports: Sequence[str] = ()
    snapshot: bool = False          # actors.restore_slots: the result carries the slot (marless/slot.py)
    agent_id: bool = False          # policies read obs ⊕ one-hot(agent index) (marless/agent_id.py)

    @classmethod
    def from_message(cls, message: Message) -> MultiAgentActorRequest:
        fields = dict(message.header[cls.HEADER])
        fields["env_imports"] = tuple(fields.get("env_imports", ()))
        return cls(**fields)


@dataclass(frozen=True)
class MultiAgentActorResult(WireResult):
    """What a multi-agent actor function returns besides its rows (the arrays): the fragment's bookkeeping and
    timings."""

    actor_rank: int
    env_steps: int                          # num_envs × fragment_steps: every env steps whatever its agents do
    agents: list[str]                       # the env's possible agents, sorted
    episode_returns: dict[str, list[float]]  # agent → the returns of its episodes that ended in this fragment
    episode_lengths: list[int]              # those episodes' lengths, one per env episode
    sampling_s: float                       # the whole call
    env_s: float                            # stepping the envs
    inference_s: float                      # the policies' forward passes
    policy_versions: dict[str, int]         # policy → the version that acted (the rows' behaviour policy)


def marless_actor_function(*, context: FunctionContext, request: Message) -> Message:
    req = MultiAgentActorRequest.from_message(request)
    started = time.perf_counter()
    context.cache["store"] = function_store(header=request.header)
    algo, spaces = _algo(context=context, req=req)
    models = _policies(context=context, req=req, algo=algo, spaces=spaces)
    slot = env_slot(cache=context.cache, req=req, centralised=algo.centralised,
                    restore=slot_state_from(message=request))
    torch.default_generator.manual_seed(derive_seed(req.seed, req.actor_rank, req.slot_seq, 1))
    try:
        arrays, episodes, timers = _rollout(algo=algo, models=models, slot=slot, req=req, spaces=spaces)
    except BaseException:
        context.cache.get("marless_slots", {}).pop(req.actor_rank, None)  # env state is now unknown
        raise
    slot.seq += 1
    result = MultiAgentActorResult(
        actor_rank=req.actor_rank, env_steps=req.num_envs * req.fragment_steps, agents=sorted(spaces),
        episode_returns=episodes[0], episode_lengths=episodes[1], sampling_s=time.perf_counter() - started,
        env_s=timers["env_s"], inference_s=timers["inference_s"],
        policy_versions={policy: int(key.rsplit("/", 1)[1]) for policy, key in req.weights_keys.items()})
    state = capture_ma_slot(slot=slot) if req.snapshot else None   # None also for an env it cannot snapshot
    if state is None:
        return result.wire_message(arrays=arrays)
    return result.wire_message(arrays={**arrays, **state.arrays}, extra_header={SLOT_META: state.meta})


def _algo(*, context: FunctionContext, req: MultiAgentActorRequest) -> tuple[Any, dict[str, EnvSpaces]]:
    """The algorithm and each agent's spaces, cached while the algo dict and the env stay the same."""
    cache = context.cache
    env_key = (req.env_id, dict(req.env_kwargs), list(req.env_imports))
    if cache.get("marless_algo_config") != req.algo or cache.get("marless_env") != env_key:
        probe = make_parallel_env(env_id=req.env_id, seed=0, kwargs=req.env_kwargs, imports=req.env_imports)
        spaces = agent_spaces(env=probe)
        probe.close()
        slots = cache.get("marless_slots", {}) if cache.get("marless_env") == env_key else {}
        cache.update(marless_algo_config=req.algo, marless_env=env_key,
                     marless_algo=multiagent_algo_from_dict(algo=req.algo),
                     marless_spaces=spaces, marless_models={}, marless_slots=slots)
        torch.set_num_threads(1)
    return cache["marless_algo"], cache["marless_spaces"]


def _policies(*, context: FunctionContext, req: MultiAgentActorRequest, algo: Any,
              spaces: dict[str, EnvSpaces]) -> dict[str, torch.nn.Module]:
    """One network per policy in use, holding the weights its key names (reloaded only when the key changes)."""
    held: dict[str, tuple[str, torch.nn.Module]] = context.cache["marless_models"]
    for agent in sorted(spaces):
        policy = req.agent_policy.get(agent)
        if policy is None or policy not in req.weights_keys:
            raise ValueError(f"agent {agent!r} maps to policy {policy!r}, which has no weights key in the request "
                             f"(weights_keys: {sorted(req.weights_keys)})")
    models = {}
    for policy in sorted(set(req.agent_policy.values())):
        agent = next(a for a in sorted(req.agent_policy) if req.agent_policy[a] == policy)
        key = req.weights_keys[policy]
        entry = held.get(policy)
        if entry is None or entry[0] != key:
            model = entry[1] if entry is not None else algo.make_policy(
                spaces=with_agent_id(spaces=spaces[agent], num_agents=len(spaces)) if req.agent_id else spaces[agent])
            try:
                load_model(model=model, message=context.cache["store"].get(key=key))
            except Exception:
                held.pop(policy, None)
                raise
            entry = (key, model)
            held[policy] = entry
        models[policy] = entry[1]
    return models


def _rollout(*, algo: Any, models: dict[str, torch.nn.Module], slot: MultiAgentSlot, req: MultiAgentActorRequest,
             spaces: dict[str, EnvSpaces]) -> tuple[dict[str, np.ndarray], tuple[dict[str, list[float]], list[int]],
                                                    dict[str, float]]:
    """Step every env ``fragment_steps`` times; per-agent env-major rows, finished episodes, timers."""
    num_envs, steps = req.num_envs, req.fragment_steps
    agents = sorted(spaces)
    buffers = {agent: _agent_buffers(space=spaces[agent], num_envs=num_envs, steps=steps, masked=agent in slot.masked)
               for agent in agents}
    states = None
    if slot.states is not None:
        state_dim = slot.states[0].shape[0]
        states = {"state": np.zeros((num_envs, steps, state_dim), np.float32),
                  "next_state": np.zeros((num_envs, steps, state_dim), np.float32)}
    timers = {"env_s": 0.0, "inference_s": 0.0}
    episode_returns: dict[str, list[float]] = {agent: [] for agent in agents}
    episode_lengths: list[int] = []
    for t in range(steps):
        tick = time.perf_counter()
        actions = _act_all(algo=algo, models=models, slot=slot, req=req, buffers=buffers, t=t)
        tock = time.perf_counter()
        timers["inference_s"] += tock - tick
        for e, env in enumerate(slot.envs):
            _step_env(env=env, e=e, t=t, slot=slot, actions=actions[e], buffers=buffers, states=states,
                      spaces=spaces, episode_returns=episode_returns, episode_lengths=episode_lengths)
        timers["env_s"] += time.perf_counter() - tock
    arrays: dict[str, np.ndarray] = {}
    for agent in agents:
        columns = buffers[agent]
        columns["cut"] = columns["terminated"] | columns["truncated"]
        columns["cut"][:, -1] = True
        columns.pop("logp" if not algo.on_policy else NEXT_ACTION_MASK, None)   # what the learners read
        for name, value in columns.items():
            arrays[f"{agent}/{name}"] = value.reshape(num_envs * steps, *value.shape[2:])
    for name, value in (states or {}).items():
        arrays[name] = value.reshape(num_envs * steps, -1)
    return arrays, (episode_returns, episode_lengths), timers


def _agent_buffers(*, space: EnvSpaces, num_envs: int, steps: int, masked: bool) -> dict[str, np.ndarray]:
    """The agent's row columns; ``masked``: also ``action_mask`` (all allowed in padding rows)."""
    obs, action = space.observation, space.action
    if not isinstance(obs, gym.spaces.Box) or not isinstance(action, (gym.spaces.Discrete, gym.spaces.Box)):
        # marless/checks.py refuses any other space before a worker starts
        raise TypeError(f"a MARLess agent observes a Box and acts in a Discrete or Box space, got {obs} and {action}")
    lead = (num_envs, steps)
    actions = np.zeros(lead, np.int64) if isinstance(action, gym.spaces.Discrete) else \
        np.zeros(lead + action.shape, np.float32)
    buffers = {"obs": np.zeros(lead + obs.shape, np.float32), "next_obs": np.zeros(lead + obs.shape, np.float32),
               "actions": actions,
               "logp": np.zeros(lead, np.float32), "rewards": np.zeros(lead, np.float32),
               "terminated": np.zeros(lead, bool), "truncated": np.zeros(lead, bool), "alive": np.zeros(lead, bool)}
    if masked and isinstance(action, gym.spaces.Discrete):   # the env's checker allows no mask on other actions
        buffers[ACTION_MASK] = np.ones(lead + (int(action.n),), bool)
        buffers[NEXT_ACTION_MASK] = np.ones(lead + (int(action.n),), bool)
    return buffers


def _act_all(*, algo: Any, models: dict[str, torch.nn.Module], slot: MultiAgentSlot, req: MultiAgentActorRequest,
             buffers: dict[str, dict[str, np.ndarray]], t: int) -> list[dict[str, Any]]:
    """Per env, the actions of its live agents; one forward pass per policy over all its (env, agent) pairs."""
    actions: list[dict[str, Any]] = [{} for _ in slot.envs]
    order = sorted(buffers)
    by_policy: dict[str, list[tuple[int, str]]] = {}
    for e, obs in enumerate(slot.obs):
        for agent in obs:
            by_policy.setdefault(req.agent_policy[agent], []).append((e, agent))
    for policy, pairs in by_policy.items():
        batch = np.stack([slot.obs[e][agent] for e, agent in pairs]).astype(np.float32, copy=False)
        inputs = append_agent_id(obs=batch, agent_index=np.array([order.index(agent) for _, agent in pairs]),
                                 num_agents=len(order)) if req.agent_id else batch
        masks = _masks(slot=slot, pairs=pairs, buffers=buffers)
        out = algo.act(model=models[policy], obs=torch.as_tensor(inputs), explore=True) if masks is None else \
            algo.act(model=models[policy], obs=torch.as_tensor(inputs), explore=True,
                     action_mask=torch.as_tensor(masks))
        logp = out.extras.get("logp")
        for j, (e, agent) in enumerate(pairs):
            columns = buffers[agent]
            columns["obs"][e, t] = batch[j]
            if masks is not None and ACTION_MASK in columns:
                columns[ACTION_MASK][e, t] = masks[j]
            columns["actions"][e, t] = out.actions[j]
            if logp is not None:
                columns["logp"][e, t] = logp[j]
            actions[e][agent] = out.actions[j]
    return actions


def _masks(*, slot: MultiAgentSlot, pairs: list[tuple[int, str]],
           buffers: dict[str, dict[str, np.ndarray]]) -> np.ndarray | None:
    """The (env, agent) pairs' action masks, B × n bool; None when none of these agents is masked (an unmasked
    agent sharing the policy with masked ones gets every action allowed)."""
    if not any(agent in slot.masked for _, agent in pairs):
        return None
    width = next(buffers[agent][ACTION_MASK].shape[-1] for _, agent in pairs if agent in slot.masked)
    return np.stack([slot.masks[e][agent] if agent in slot.masked else np.ones(width, bool) for e, agent in pairs])


def _step_env(*, env: Any, e: int, t: int, slot: MultiAgentSlot, actions: dict[str, Any],
              buffers: dict[str, dict[str, np.ndarray]], states: dict[str, np.ndarray] | None,
              spaces: dict[str, EnvSpaces], episode_returns: dict[str, list[float]],
              episode_lengths: list[int]) -> None:
    """One step of env ``e``: fill row t for every agent, then reset the env when no agent is live."""
    env_actions = {agent: _env_action(action=a, space=spaces[agent].action) for agent, a in actions.items()}
    if states is not None and slot.states is not None:   # both or neither: a centralised algorithm's rollout
        states["state"][e, t] = slot.states[e]
    obs, rewards, terminations, truncations, infos = env.step(env_actions)
    next_masks = masks_from(infos={agent: infos.get(agent) for agent in actions}) if slot.masked else {}
    for agent, columns in buffers.items():
        if agent in actions:
            columns["next_obs"][e, t] = obs[agent]
            if agent in next_masks and NEXT_ACTION_MASK in columns:   # the target's max runs over these
                columns[NEXT_ACTION_MASK][e, t] = next_masks[agent]
            columns["rewards"][e, t] = rewards[agent]
            columns["terminated"][e, t] = bool(terminations[agent])
            columns["truncated"][e, t] = bool(truncations[agent])
            columns["alive"][e, t] = True
            slot.returns[e][agent] += float(rewards[agent])
        else:  # finished before the other agents: a padding row
            last = slot.obs[e].get(agent, columns["next_obs"][e, t - 1] if t > 0 else columns["obs"][e, t])
            columns["obs"][e, t] = columns["next_obs"][e, t] = last
            columns["terminated"][e, t] = True
    slot.lengths[e] += 1
    live = {agent: o for agent, o in obs.items() if agent in env.agents}
    if states is not None:
        states["next_state"][e, t] = global_state(env=env)
    if env.agents:
        slot.obs[e] = live
        if slot.masked:
            slot.masks[e] = masks_from(infos={agent: infos.get(agent) for agent in live})
        if states is not None and slot.states is not None:
            slot.states[e] = states["next_state"][e, t]
        return
    for agent in episode_returns:
        episode_returns[agent].append(slot.returns[e][agent])
        slot.returns[e][agent] = 0.0
    episode_lengths.append(int(slot.lengths[e]))
    slot.lengths[e] = 0
    reset_obs, reset_infos = env.reset()
    slot.obs[e] = dict(reset_obs)
    if slot.masked:
        slot.masks[e] = masks_from(infos=reset_infos)
    if states is not None and slot.states is not None:
        slot.states[e] = global_state(env=env)


def _env_action(*, action: np.ndarray, space: Any) -> Any:
    if not space.shape:
        return int(action)
    return clip_action(action=np.asarray(action), space=space)
