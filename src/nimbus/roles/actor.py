"""What every actor function shares (on-policy, off-policy; the multi-agent actor uses ``derive_seed``): the request,
the warm worker's env slot and policy cache, stepping a slot's envs, and seeds.

A warm worker keeps the model of one ``policy_version`` and, per actor rank, an *env slot* (the envs, their current
observations and running episode returns) in ``context.cache``, so episodes continue across invocations exactly as
they would in a long-lived actor. A slot whose ``slot_seq`` does not match the request (a cold worker, a retry, a rank
that moved) is discarded and its envs reset with a fresh seed.

Example (what an actor function does)::

    algo, model = policy_at(context=context, req=req)
    slot = env_slot(context=context, req=req, restore=slot_state_from(message=request))
    step = step_all(slot=slot, actions=actions)      # next_obs, final_obs, rewards, terminated, truncated, done
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nimbus.algos.base import Algorithm
from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
from nimbus.data.codec import Message
from nimbus.data.request import WireRequest
from nimbus.data.result import WireResult
from nimbus.envs.make import make_env
from nimbus.envs.obsnorm import rms_from_extras
from nimbus.envs.slot_state import SLOT_META, SlotState, capture_slot, restore_slot
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import load_model
from nimbus.runtime.base import FunctionContext


@dataclass(frozen=True)
class FragmentRequest(WireRequest):
    """What every actor request (``ActorRequest``, MARLess's ``MultiAgentActorRequest``) starts with: the envs of
    rank ``actor_rank``'s slot and the fragment to step them for. Its fields come first in the header, in this
    order, then the subclass's."""

    env_id: str
    env_kwargs: dict[str, Any]
    num_envs: int
    fragment_steps: int
    seed: int
    actor_rank: int
    slot_seq: int            # fragments this rank has produced: a cached slot of another sequence is reset

    def to_message(self, *, restore: SlotState | None = None) -> Message:
        """The request; ``restore``: the env slot to rebuild (a resumed run's first fragment of this rank, or a
        worker that does not hold the rank's newest slot)."""
        if restore is None:
            return self.wire_message()
        return self.wire_message(extra_header={SLOT_META: restore.meta}, arrays=dict(restore.arrays))


@dataclass(frozen=True)
class ActorRequest(FragmentRequest, header="actor", affinity="actor-{actor_rank}"):
    policy_version: int
    weights_key: str
    algo: dict[str, Any]
    snapshot: bool = False   # return the env slot's state with the rows (train.exact_resume)
    env_imports: Sequence[str] = ()    # env.imports: modules that register the user's env ids
    env_wrappers: Sequence[str] = ()   # env.wrappers: gymnasium wrappers, applied in order
    env_backend: str = "gymnasium"     # actors.env_backend, resolved (envs/batched.py): gymnasium, vector, envpool


@dataclass(frozen=True)
class ActorResult(WireResult):
    """What an actor function returns besides its rows (the arrays): the fragment's bookkeeping and timings."""

    actor_rank: int
    policy_version: int          # the version that acted (the rows' behaviour policy)
    env_steps: int
    episode_returns: list[float]  # the episodes that ended in this fragment
    episode_lengths: list[int]
    sampling_s: float            # the whole call
    env_s: float                 # stepping the envs
    inference_s: float           # the policy's forward passes
    random_actions: bool = False  # off-policy warm-up: uniform actions, no policy


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


def with_snapshot(*, req: ActorRequest, slot: EnvSlot, result: Message) -> Message:
    """With ``req.snapshot``, the result also carries the slot as the next fragment will find it (exact resume and
    ``actors.restore_slots``, envs/slot_state.py)."""
    if not req.snapshot:
        return result
    state = capture_slot(slot=slot)
    return Message(header={**result.header, SLOT_META: state.meta}, arrays={**result.arrays, **state.arrays})


def request_spaces(*, req: Any) -> EnvSpaces:
    """The observation and action spaces of the env a request names (``env_id``, ``env_kwargs``, ``env_imports``,
    ``env_wrappers``): one env made, read and closed, when a warm worker (re)builds its model."""
    probe = make_env(env_id=req.env_id, seed=0, kwargs=req.env_kwargs, imports=req.env_imports,
                     wrappers=req.env_wrappers)
    spaces = EnvSpaces(observation=probe.observation_space, action=probe.action_space)
    probe.close()
    return spaces


def policy_at(*, context: FunctionContext, req: ActorRequest) -> tuple[Algorithm, torch.nn.Module]:
    """The algorithm and the model holding ``req.weights_key`` (weights/<policy>/<version>), cached in the warm
    worker: rebuilt when the algorithm config or the env changes, reloaded when the key does."""
    cache = context.cache
    if cache.get("algo_config") != req.algo or cache.get("env_id") != (req.env_id, list(req.env_wrappers)):
        config = ALGO_CONFIGS[req.algo["name"]].model_validate(req.algo)
        spaces = request_spaces(req=req)
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


def env_slot(*, context: FunctionContext, req: ActorRequest, restore: SlotState | None = None) -> EnvSlot:
    """This rank's env slot: the cached one when its ``slot_seq`` and env count match the request, else fresh envs
    seeded from (seed, rank, slot_seq); ``restore``: the state a resumed run's envs continue from."""
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


def spaces_of(*, slot: EnvSlot) -> EnvSpaces:
    """The observation and action spaces of the slot's envs."""
    env = slot.envs[0]
    return EnvSpaces(observation=env.observation_space, action=env.action_space)


def step_all(*, slot: EnvSlot, actions: np.ndarray) -> dict[str, np.ndarray]:
    """One step of every env of the slot (an env whose episode ended is reset); ``final_obs`` is the observation
    the step returned, ``next_obs`` what the policy sees next."""
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
