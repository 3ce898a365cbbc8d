"""The actor function: run the policy of one ``policy_version`` in a few envs for one fragment.

It runs inside a runtime worker. A warm worker keeps the model and, per actor rank, an *env slot*
(the envs, their current observations and running episode returns) in ``context.cache``, so episodes
continue across invocations exactly as they would in a long-lived actor. The driver sends a
``slot_seq`` (fragments this rank has produced); a slot whose sequence does not match (a cold worker,
a retry, a rank that moved) is discarded and its envs reset with a fresh seed — unfinished episodes
are dropped, never counted twice. Output rows are env-major: each env's ``fragment_steps`` rows are
contiguous and in time order, which is what GAE and V-trace need.

Request header: see ``ActorRequest``. Result: a Message whose arrays follow the algorithm's
``buffer_spec`` (leading dim = rows) and whose header lists finished episodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from nimbus.algos.base import Algorithm
from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
from nimbus.data.codec import Message
from nimbus.data.stores import function_store
from nimbus.envs.make import make_env
from nimbus.envs.obsnorm import fragment_moments, normalize, rms_from_extras
from nimbus.envs.slot_state import SLOT_META, SlotState, capture_slot, restore_slot, slot_state_from
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.distributions import clip_action
from nimbus.models.weights import load_model
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.faults import fault_point


@dataclass(frozen=True)
class ActorRequest:
    env_id: str
    env_kwargs: dict[str, Any]
    num_envs: int
    fragment_steps: int
    seed: int
    actor_rank: int
    slot_seq: int
    policy_version: int
    weights_key: str
    algo: dict[str, Any]
    snapshot: bool = False   # return the env slot's state with the rows (train.exact_resume)
    env_imports: Sequence[str] = ()    # env.imports: modules that register the user's env ids
    env_wrappers: Sequence[str] = ()   # env.wrappers: gymnasium wrappers, applied in order

    def to_message(self, *, restore: SlotState | None = None) -> Message:
        """The request; ``restore``: the env slot to rebuild (a resumed run's first fragment of this rank)."""
        header = {"actor": dict(vars(self)), "_affinity": f"actor-{self.actor_rank}"}  # shallow
        if restore is None:
            return Message(header=header)
        return Message(header={**header, SLOT_META: restore.meta}, arrays=restore.arrays)

    @classmethod
    def from_message(cls, message: Message) -> "ActorRequest":
        return cls(**message.header["actor"])


@dataclass
class EnvSlot:
    envs: list[Any]
    obs: np.ndarray
    seq: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray

    def finish_episodes(self, *, done: np.ndarray, returns: list[float], lengths: list[int]) -> np.ndarray:
        """Append the return and length of each env whose episode ended (``done``), reset its tallies, and
        return those envs' indices."""
        ended = np.flatnonzero(done)
        for i in ended:
            returns.append(float(self.episode_returns[i]))
            lengths.append(int(self.episode_lengths[i]))
            self.episode_returns[i] = 0.0
            self.episode_lengths[i] = 0
        return ended


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers (stable across processes, unlike hash())."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


def actor_function(*, context: FunctionContext, request: Message) -> Message:
    req = ActorRequest.from_message(request)
    started = time.perf_counter()
    context.cache["store"] = function_store(header=request.header)  # the run's Store, named by the request
    fault_point(name="actor.started")
    algo, model = _policy(context=context, req=req)
    slot = _env_slot(context=context, req=req, restore=slot_state_from(message=request))
    # the actor's model is on the CPU: seed the CPU generator only (torch.manual_seed also queues CUDA/MPS/XPU
    # seeding, ~0.1 ms a call); the samples are the same
    torch.default_generator.manual_seed(derive_seed(req.seed, req.actor_rank, req.slot_seq, 1))
    try:
        arrays, episodes = _rollout(algo=algo, model=model, slot=slot, req=req, rms=context.cache["obs_rms"])
    except BaseException:
        context.cache.get("slots", {}).pop(req.actor_rank, None)  # env state is now unknown
        raise
    slot.seq += 1
    header = {"actor_rank": req.actor_rank, "policy_version": req.policy_version,
              "env_steps": req.num_envs * req.fragment_steps, "episode_returns": episodes[0],
              "episode_lengths": episodes[1], "sampling_s": time.perf_counter() - started, **episodes[2]}
    return with_snapshot(req=req, slot=slot, result=Message(header=header, arrays=arrays))


def with_snapshot(*, req: ActorRequest, slot: EnvSlot, result: Message) -> Message:
    """With ``req.snapshot``, the result also carries the slot as the next fragment will find it (exact resume and
    ``actors.restore_slots``, envs/slot_state.py)."""
    if not req.snapshot:
        return result
    state = capture_slot(slot=slot)
    return Message(header={**result.header, SLOT_META: state.meta}, arrays={**result.arrays, **state.arrays})


def _policy(*, context: FunctionContext, req: ActorRequest) -> tuple[Algorithm, torch.nn.Module]:
    cache = context.cache
    if cache.get("algo_config") != req.algo or cache.get("env_id") != (req.env_id, list(req.env_wrappers)):
        config = ALGO_CONFIGS[req.algo["name"]].model_validate(req.algo)
        probe = make_env(env_id=req.env_id, seed=0, kwargs=req.env_kwargs, imports=req.env_imports,
                         wrappers=req.env_wrappers)
        spaces = EnvSpaces(observation=probe.observation_space, action=probe.action_space)
        probe.close()
        algo = make_algorithm(config=config)
        # env slots survive a change of hyperparameters (population members share workers), not of env
        env_key = (req.env_id, list(req.env_wrappers))
        slots = cache.get("slots", {}) if cache.get("env_id") == env_key else {}
        cache.update(algo_config=req.algo, env_id=env_key, algo=algo, spaces=spaces,
                     model=algo.make_model(spaces=spaces), weights_key=None, slots=slots)
        torch.set_num_threads(1)
    if cache["weights_key"] != req.weights_key:  # weights/<policy>/<version>: several policies share workers
        store = cache["store"]
        extras = load_model(model=cache["model"], message=store.get(key=req.weights_key))
        cache["obs_rms"] = rms_from_extras(extras=extras, shape=cache["spaces"].observation.shape) \
            if req.algo.get("normalize_obs") else None
        cache["weights_key"] = req.weights_key
    return cache["algo"], cache["model"]


def _env_slot(*, context: FunctionContext, req: ActorRequest, restore: SlotState | None = None) -> EnvSlot:
    slots: dict[int, EnvSlot] = context.cache["slots"]
    slot = slots.get(req.actor_rank)
    if slot is not None and slot.seq == req.slot_seq and len(slot.envs) == req.num_envs:
        return slot
    if slot is not None:
        for env in slot.envs:
            env.close()
    base = derive_seed(req.seed, req.actor_rank, req.slot_seq)
    envs = [make_env(env_id=req.env_id, seed=(base + i) % (2**31), kwargs=req.env_kwargs, actor_rank=req.actor_rank,
                     imports=req.env_imports, wrappers=req.env_wrappers) for i in range(req.num_envs)]
    obs = np.stack([env.reset(seed=(base + i) % (2**31))[0] for i, env in enumerate(envs)])
    slot = EnvSlot(envs=envs, obs=obs, seq=req.slot_seq, episode_returns=np.zeros(req.num_envs),
                   episode_lengths=np.zeros(req.num_envs, dtype=np.int64))
    if restore is not None:  # a resumed run: the envs continue exactly where the checkpointed ones were
        restore_slot(slot=slot, state=restore)
    slots[req.actor_rank] = slot
    return slot


def _rollout(*, algo: Algorithm, model: torch.nn.Module, slot: EnvSlot, req: ActorRequest,
             rms: Any = None) -> tuple[dict[str, np.ndarray], tuple[list[float], list[int], dict[str, float]]]:
    """Step every env ``fragment_steps`` times; returns env-major rows and finished episodes."""
    num_envs, steps = req.num_envs, req.fragment_steps
    spaces: EnvSpaces = _spaces_of(slot)
    columns: dict[str, list[np.ndarray]] = {}
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
        step = _step_all(slot=slot, actions=env_actions)
        timers["inference_s"] += tock - tick
        timers["env_s"] += time.perf_counter() - tock
        for i in slot.finish_episodes(done=step["done"], returns=finished_returns, lengths=finished_lengths):
            if step["truncated"][i] and not step["terminated"][i]:
                truncated_final[(t, int(i))] = normalize(rms=rms, obs=step["final_obs"][i])
        row = {"obs": policy_obs, "raw_obs": slot.obs, "actions": out.actions, "rewards": step["rewards"],
               "terminated": step["terminated"], "truncated": step["truncated"], **out.extras}
        for key, value in row.items():
            columns.setdefault(key, []).append(np.asarray(value))
        slot.obs = step["next_obs"]
    arrays = {key: np.stack(values, axis=1) for key, values in columns.items()}  # [envs, steps, ...]
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


def _spaces_of(slot: EnvSlot) -> EnvSpaces:
    env = slot.envs[0]
    return EnvSpaces(observation=env.observation_space, action=env.action_space)


def _step_all(*, slot: EnvSlot, actions: np.ndarray) -> dict[str, np.ndarray]:
    num_envs = len(slot.envs)
    next_obs = np.empty_like(slot.obs)
    final_obs = np.empty_like(slot.obs)
    rewards = np.zeros(num_envs, dtype=np.float32)
    terminated = np.zeros(num_envs, dtype=bool)
    truncated = np.zeros(num_envs, dtype=bool)
    for i, env in enumerate(slot.envs):
        action = actions[i].item() if actions[i].ndim == 0 else actions[i]
        obs, reward, term, trunc, _ = env.step(action)
        rewards[i], terminated[i], truncated[i] = reward, term, trunc
        slot.episode_returns[i] += reward
        slot.episode_lengths[i] += 1
        final_obs[i] = obs
        next_obs[i] = env.reset()[0] if (term or trunc) else obs
    return {"next_obs": next_obs, "final_obs": final_obs, "rewards": rewards, "terminated": terminated,
            "truncated": truncated, "done": terminated | truncated}


def _next_values(*, algo: Algorithm, model: torch.nn.Module, arrays: dict[str, np.ndarray],
                 last_obs: np.ndarray, truncated_final: dict[tuple[int, int], np.ndarray]) -> np.ndarray:
    """V(s_{t+1}) per row; on truncation V(final observation), at the fragment's end V(next obs)."""
    values = arrays["values"]
    next_values = np.empty_like(values)
    next_values[:, :-1] = values[:, 1:]
    extra_obs = [last_obs] + ([np.stack(list(truncated_final.values()))] if truncated_final else [])
    with torch.no_grad():
        extra = model.value(torch.as_tensor(np.concatenate(extra_obs), dtype=torch.float32))
    extra = extra.reshape(-1).numpy().astype(values.dtype)
    next_values[:, -1] = extra[:len(last_obs)]
    for j, (t, i) in enumerate(truncated_final):
        next_values[i, t] = extra[len(last_obs) + j]
    return next_values
