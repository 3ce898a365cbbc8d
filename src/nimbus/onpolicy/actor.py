"""The actor function: run the policy of one ``policy_version`` in a few envs for one fragment.

It runs inside a runtime worker. A warm worker keeps the model and, per actor rank, an *env slot*
(the envs, their current observations and running episode returns) in ``context.cache``, so episodes
continue across invocations exactly as they would in a long-lived actor (roles/actor.py). The driver sends a
``slot_seq`` (fragments this rank has produced); a slot whose sequence does not match (a cold worker,
a retry, a rank that moved) is discarded and its envs reset with a fresh seed — unfinished episodes
are dropped, never counted twice. Output rows are env-major: each env's ``fragment_steps`` rows are
contiguous and in time order, which is what GAE and V-trace need. The rows go into arrays allocated once per
fragment, one write per key and step.

``env_backend`` (``actors.env_backend``) picks how the slot's envs step: ``gymnasium`` one by one (roles/actor.py),
``vector`` or ``envpool`` in one call per step (envs/batched.py), with the same same-step autoreset rows.

Request header: see ``ActorRequest``. Result: a Message whose arrays follow the algorithm's
``buffer_spec`` (leading dim = rows) and whose header lists finished episodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nimbus.algos.base import Algorithm
from nimbus.data.codec import Message
from nimbus.data.stores import function_store
from nimbus.envs.batched import make_batched
from nimbus.envs.obsnorm import fragment_moments, normalize
from nimbus.envs.slot_state import SlotState, restore_slot, slot_state_from
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.distributions import clip_action
from nimbus.models.mlp import PolicyValueModel
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
from nimbus.runtime.faults import fault_point


def actor_function(*, context: FunctionContext, request: Message) -> Message:
    req = ActorRequest.from_message(request)
    started = time.perf_counter()
    context.cache["store"] = function_store(header=request.header)  # the run's Store, named by the request
    fault_point(name="actor.started")
    algo, model = policy_at(context=context, req=req)
    restore = slot_state_from(message=request)
    slot = env_slot(context=context, req=req, restore=restore) if req.env_backend == "gymnasium" else \
        batched_slot(context=context, req=req, restore=restore)
    # the actor's model is on the CPU: seed the CPU generator only (torch.manual_seed also queues CUDA/MPS/XPU
    # seeding, ~0.1 ms a call); the samples are the same
    torch.default_generator.manual_seed(derive_seed(req.seed, req.actor_rank, req.slot_seq, 1))
    try:
        arrays, episodes = _rollout(algo=algo, model=model, slot=slot, req=req, rms=context.cache["obs_rms"])
    except BaseException:
        context.cache.get("slots", {}).pop(req.actor_rank, None)  # env state is now unknown
        raise
    slot.seq += 1
    result = ActorResult(actor_rank=req.actor_rank, policy_version=req.policy_version,
                         env_steps=req.num_envs * req.fragment_steps, episode_returns=episodes[0],
                         episode_lengths=episodes[1], sampling_s=time.perf_counter() - started,
                         env_s=episodes[2]["env_s"], inference_s=episodes[2]["inference_s"])
    return with_snapshot(req=req, slot=slot, result=result.wire_message(arrays=arrays))


@dataclass
class BatchedSlot(EnvSlot):
    """An env slot whose envs step in one call (``batch``: envs/batched.py); ``envs`` are the gymnasium envs a
    snapshot captures (none for envpool, which the config keeps away from snapshots)."""

    batch: Any = None
    backend: str = "vector"


def batched_slot(*, context: FunctionContext, req: ActorRequest, restore: SlotState | None = None) -> BatchedSlot:
    """``env_slot``'s twin for the batched backends: the cached slot when its ``slot_seq``, env count and backend
    match, else a fresh batch seeded from (seed, rank, slot_seq); ``restore``: the state a resumed run continues."""
    slots: dict[int, EnvSlot] = context.cache["slots"]
    slot = slots.get(req.actor_rank)
    if isinstance(slot, BatchedSlot) and slot.seq == req.slot_seq and slot.backend == req.env_backend \
            and slot.batch.num_envs == req.num_envs:
        return slot
    if isinstance(slot, BatchedSlot):
        slot.batch.close()
    elif slot is not None:
        for env in slot.envs:
            env.close()
    batch = make_batched(backend=req.env_backend, env_id=req.env_id, num_envs=req.num_envs,
                         seed=derive_seed(req.seed, req.actor_rank, req.slot_seq), kwargs=req.env_kwargs,
                         actor_rank=req.actor_rank, imports=req.env_imports, wrappers=req.env_wrappers)
    slot = BatchedSlot(envs=batch.envs, obs=batch.reset(), seq=req.slot_seq, episode_returns=np.zeros(req.num_envs),
                       episode_lengths=np.zeros(req.num_envs, dtype=np.int64), batch=batch, backend=req.env_backend)
    if restore is not None:  # a resumed run (vector only: the config refuses snapshots with envpool)
        restore_slot(slot=slot, state=restore)
    slots[req.actor_rank] = slot
    return slot


def _stepper(*, slot: EnvSlot) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """One step of every env of the slot, with the episode tallies kept: the batch's call, or the per-env loop."""
    if not isinstance(slot, BatchedSlot):
        return lambda actions: step_all(slot=slot, actions=actions)

    def step(actions: np.ndarray) -> dict[str, np.ndarray]:
        out = slot.batch.step(actions=actions)
        slot.episode_returns += out["rewards"]
        slot.episode_lengths += 1
        return {**out, "done": out["terminated"] | out["truncated"]}
    return step


def _rollout(*, algo: Algorithm, model: torch.nn.Module, slot: EnvSlot, req: ActorRequest,
             rms: Any = None) -> tuple[dict[str, np.ndarray], tuple[list[float], list[int], dict[str, float]]]:
    """Step every env ``fragment_steps`` times; returns env-major rows and finished episodes."""
    num_envs, steps = req.num_envs, req.fragment_steps
    spaces: EnvSpaces = EnvSpaces(observation=slot.batch.observation_space, action=slot.batch.action_space) \
        if isinstance(slot, BatchedSlot) else spaces_of(slot=slot)
    step_envs = _stepper(slot=slot)
    columns: dict[str, np.ndarray] = {}
    timers = {"env_s": 0.0, "inference_s": 0.0}
    truncated_final: dict[tuple[int, int], np.ndarray] = {}
    finished_returns: list[float] = []
    finished_lengths: list[int] = []
    for t in range(steps):
        tick = time.perf_counter()
        with torch.no_grad():
            policy_obs = normalize(rms=rms, obs=slot.obs)  # what the policy sees is what the learner trains on
            out = algo.act(model=model, obs=torch.as_tensor(policy_obs, dtype=torch.float32), explore=True)
        env_actions = clip_action(action=out.actions, space=spaces.action)
        tock = time.perf_counter()
        step = step_envs(env_actions)
        timers["inference_s"] += tock - tick
        timers["env_s"] += time.perf_counter() - tock
        for i in slot.finish_episodes(done=step["done"], returns=finished_returns, lengths=finished_lengths):
            if step["truncated"][i] and not step["terminated"][i]:
                truncated_final[(t, int(i))] = normalize(rms=rms, obs=step["final_obs"][i])
        row = {"obs": policy_obs, "raw_obs": slot.obs, "actions": out.actions, "rewards": step["rewards"],
               "terminated": step["terminated"], "truncated": step["truncated"], **out.extras}
        for key, value in row.items():
            value = np.asarray(value)
            if key not in columns:   # [envs, steps, ...], allocated once per fragment
                columns[key] = np.empty((num_envs, steps, *value.shape[1:]), dtype=value.dtype)
            columns[key][:, t] = value
        slot.obs = step["next_obs"]
    arrays = columns
    tick = time.perf_counter()
    raw_obs = arrays.pop("raw_obs")
    last_obs = normalize(rms=rms, obs=slot.obs)
    arrays["next_values"] = _next_values(algo=algo, model=model, arrays=arrays, last_obs=last_obs,
                                         truncated_final=truncated_final)
    timers["inference_s"] += time.perf_counter() - tick
    cut = arrays["terminated"] | arrays["truncated"]
    cut[:, -1] = True
    arrays["cut"] = cut
    flat = {key: value.reshape(num_envs * steps, *value.shape[2:]) for key, value in arrays.items()}
    if rms is not None:
        flat.update(fragment_moments(raw_obs=raw_obs.reshape(num_envs * steps, *raw_obs.shape[2:])))
    return flat, (finished_returns, finished_lengths, timers)


def _next_values(*, algo: Algorithm, model: torch.nn.Module, arrays: dict[str, np.ndarray],
                 last_obs: np.ndarray, truncated_final: dict[tuple[int, int], np.ndarray]) -> np.ndarray:
    """V(s_{t+1}) per row; on truncation V(final observation), at the fragment's end V(next obs)."""
    if not isinstance(model, PolicyValueModel):   # every on-policy algorithm's make_model builds one (algos/ppo)
        raise TypeError(f"the on-policy actor needs a policy-value model, got {type(model).__name__}")
    values = arrays["values"]
    next_values = np.empty_like(values)
    next_values[:, :-1] = values[:, 1:]
    extra_obs = [last_obs] + ([np.stack(list(truncated_final.values()))] if truncated_final else [])
    with torch.no_grad():
        extra_values = model.value(torch.as_tensor(np.concatenate(extra_obs), dtype=torch.float32))
    extra = extra_values.reshape(-1).numpy().astype(values.dtype)
    next_values[:, -1] = extra[:len(last_obs)]
    for j, (t, i) in enumerate(truncated_final):
        next_values[i, t] = extra[len(last_obs) + j]
    return next_values
