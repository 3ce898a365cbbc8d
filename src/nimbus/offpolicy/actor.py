"""The off-policy actor function (DQN, SAC, IMPALA): transitions (s, a, r, s', terminated, truncated).

It shares the on-policy actor's warm state (roles/actor.py): the model of one ``policy_version``
cached per worker, and per actor rank an env slot whose episodes continue across invocations. What
differs is the row: ``next_obs`` is the observation the env returned for that step — on truncation
(and termination) the true final observation, not the next episode's reset — so the learner can
bootstrap from it; there are no value columns. Exploration comes from the policy: DQN's ε lives in
its model (the learner sets it from the run's progress, so it travels with the weights); with
``random_actions`` (SAC before ``learning_starts``) every env samples its own seeded action space.
Rows are env-major: each env's ``fragment_steps`` rows are contiguous and in time order (n-step
segments, IMPALA's [T, B] columns). With ``snapshot`` the result carries the env slot and a request may carry one to
restore (``actors.restore_slots``, as the on-policy actor does; used when IMPACT runs under
``stellaris``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from nimbus.algos.base import Algorithm
from nimbus.data.codec import Message
from nimbus.data.stores import function_store
from nimbus.envs.slot_state import slot_state_from
from nimbus.models.distributions import clip_action
from nimbus.roles.actor import (
    ActorRequest,
    ActorResult,
    EnvSlot,
    derive_seed,
    env_slot,
    policy_at,
    spaces_of,
    step_all,
    with_snapshot,
)
from nimbus.runtime.base import FunctionContext

Episodes = tuple[list[float], list[int]]


@dataclass(frozen=True)
class OffPolicyActorRequest(ActorRequest):
    random_actions: bool = False   # uniform random actions (SAC's warm-up before learning_starts)


def offpolicy_actor_function(*, context: FunctionContext, request: Message) -> Message:
    req = OffPolicyActorRequest.from_message(request)
    started = time.perf_counter()
    context.cache["store"] = function_store(header=request.header)  # the run's Store, named by the request
    algo, model = policy_at(context=context, req=req)
    slot = env_slot(context=context, req=req, restore=slot_state_from(message=request))
    torch.manual_seed(derive_seed(req.seed, req.actor_rank, req.slot_seq, 1))
    timers = {"env_s": 0.0, "inference_s": 0.0}
    try:
        arrays, (returns, lengths) = _transitions(algo=algo, model=model, slot=slot, req=req, timers=timers)
    except BaseException:
        context.cache.get("slots", {}).pop(req.actor_rank, None)  # env state is now unknown
        raise
    slot.seq += 1
    result = ActorResult(actor_rank=req.actor_rank, policy_version=req.policy_version,
                         env_steps=req.num_envs * req.fragment_steps, episode_returns=returns,
                         episode_lengths=lengths, random_actions=req.random_actions,
                         sampling_s=time.perf_counter() - started, env_s=timers["env_s"],
                         inference_s=timers["inference_s"])
    return with_snapshot(req=req, slot=slot, result=result.wire_message(arrays=arrays))


def _obs_tensor(obs: np.ndarray) -> torch.Tensor:
    """uint8 frames stay uint8 (the CNN scales them); everything else as float32."""
    return torch.as_tensor(obs) if obs.dtype == np.uint8 else torch.as_tensor(obs, dtype=torch.float32)


def _act(*, algo: Algorithm, model: torch.nn.Module, slot: EnvSlot,
         random_actions: bool) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    if random_actions:
        return np.stack([np.asarray(env.action_space.sample()) for env in slot.envs]), {}
    with torch.no_grad():
        out = algo.act(model=model, obs=_obs_tensor(slot.obs), explore=True)
    return out.actions, out.extras


def _transitions(*, algo: Algorithm, model: torch.nn.Module, slot: EnvSlot, req: OffPolicyActorRequest,
                 timers: dict[str, float]) -> tuple[dict[str, np.ndarray], Episodes]:
    """Step every env ``fragment_steps`` times; env-major flat rows and the episodes that finished."""
    action_space = spaces_of(slot=slot).action
    columns: dict[str, list[np.ndarray]] = {}
    returns: list[float] = []
    lengths: list[int] = []
    for _ in range(req.fragment_steps):
        tick = time.perf_counter()
        actions, extras = _act(algo=algo, model=model, slot=slot, random_actions=req.random_actions)
        tock = time.perf_counter()
        step = step_all(slot=slot, actions=clip_action(action=actions, space=action_space))
        timers["inference_s"] += tock - tick
        timers["env_s"] += time.perf_counter() - tock
        slot.finish_episodes(done=step["done"], returns=returns, lengths=lengths)
        row = {"obs": slot.obs, "actions": actions, "rewards": step["rewards"], "next_obs": step["final_obs"],
               "terminated": step["terminated"], "truncated": step["truncated"], **extras}
        for key, value in row.items():
            columns.setdefault(key, []).append(np.asarray(value))
        slot.obs = step["next_obs"]
    n = req.num_envs * req.fragment_steps
    flat = {}
    for key, values in columns.items():
        stacked = np.stack(values, axis=1)  # [envs, steps, ...]: env-major
        flat[key] = stacked.reshape(n, *stacked.shape[2:])
    return flat, (returns, lengths)
