"""State snapshots of mpe2 Parallel envs, without pickling them: what lets a multi-agent actor rank's episodes
go on in another worker (``actors.restore_slots``, marless/slot.py), as envs/snapshot.py does for
gymnasium envs.

The arrays travel packed into one float64 vector with their layout in the dict (``_pack``).

An env built by ``make_parallel_env`` is ``ContractCheckedParallel(aec_to_parallel(OrderEnforcing(AssertOutOfBounds(
raw))))``, with ``raw`` an mpe2 ``SimpleEnv``. A snapshot holds, as arrays plus a JSON-able dict:

* every entity of the world (agents, then landmarks): each attribute of the entity, of its ``state`` and of its
  ``action`` that is an array (positions, velocities, communication, colours, the action being applied), a plain
  value, or another entity (``goal_a`` in simple_adversary, stored as that entity's index);
* the AEC env's bookkeeping (step count, live agents, agent selection, rewards and flags so far, the actions of
  the current cycle) and its random generator, as numpy's bit-generator state;
* the wrappers' counters (order enforcement, the contract checker's episode and step, the latest observations).

A user's ParallelEnv whose class defines ``get_state()`` and ``set_state(state)`` (envs/snapshot.py's contract: a
dict of names to numeric arrays, everything a step or reset reads) is captured through them instead, with its
live ``agents`` and the contract checker's counters and latest observations.

An env whose world holds anything else, or that is neither an mpe2 env nor a user's under the contract, raises
``SnapshotUnsupported`` naming the reason; ``check_parallel_snapshot`` runs a trial capture, which the
multi-agent trainer does at build time, so ``actors.restore_slots`` on such an env is a config error before any
worker starts.

Example::

    arrays, meta = capture_parallel(env=env)
    restore_parallel(env=other, arrays=arrays, meta=meta)   # other: make_parallel_env(...) of the same id, reset
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nimbus.envs.masks import SplitActionMask
from nimbus.envs.parallel_images import ScaleUint8Observations
from nimbus.envs.snapshot import SnapshotUnsupported, has_user_state, user_state_arrays

_PARTS = ("entity", "state", "action")
_ENV_FLAGS = ("rewards", "_cumulative_rewards", "terminations", "truncations")


def check_parallel_snapshot(*, env: Any, seed: int) -> None:
    """Raise SnapshotUnsupported unless ``env`` (made by make_parallel_env) can be snapshotted: a trial capture
    after a reset."""
    env.reset(seed=seed)
    capture_parallel(env=env)


def capture_parallel(*, env: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    if has_user_state(_user_env(env=env)):
        return _capture_user(env=env)
    parallel, order, raw = _layers(env=env)
    entities = list(raw.world.agents) + list(raw.world.landmarks)
    index = {id(entity): i for i, entity in enumerate(entities)}
    arrays: dict[str, np.ndarray] = {}
    meta_entities = []
    for i, entity in enumerate(entities):
        parts = {}
        for part, obj in _entity_parts(entity=entity):
            values = {}
            for name, value in vars(obj).items():
                if name in ("state", "action") and part == "entity":
                    continue
                if isinstance(value, np.ndarray):
                    arrays[f"e{i}.{part}.{name}"] = value.copy()
                    values[name] = {"array": True}
                elif id(value) in index:
                    values[name] = {"entity": index[id(value)]}
                elif value is None or isinstance(value, (bool, int, float, str)):
                    values[name] = {"value": value}
                else:
                    raise SnapshotUnsupported(f"no state snapshot for {type(raw).__name__}: entity {entity.name!r} "
                                              f"holds {part}.{name} of type {type(value).__name__}")
            parts[part] = values
        meta_entities.append(parts)
    for j, action in enumerate(raw.current_actions):
        if action is not None:
            arrays[f"current_action.{j}"] = np.array(action)
    for agent, obs in env.latest_observations.items():
        arrays[f"latest_obs.{agent}"] = np.array(obs)
    flat, layout = _pack(arrays=arrays, env_name=type(raw).__name__)
    meta = {"layout": layout,"entities": meta_entities, "steps": int(raw.steps), "agents": list(raw.agents),
            "agent_selection": raw.agent_selection, "selector": dict(vars(raw._agent_selector)),
            "flags": {name: {a: _plain(v) for a, v in getattr(raw, name).items()} for name in _ENV_FLAGS},
            "infos": _plain(raw.infos), "num_current_actions": len(raw.current_actions),
            "rng": raw.np_random.bit_generator.state, "parallel_agents": list(parallel.agents),
            "order": {"has_reset": order._has_reset, "has_updated": order._has_updated},
            "checker": {"episode": env._episode, "step": env._step, "seeded": env._seeded}}
    return {"flat": flat}, meta


def restore_parallel(*, env: Any, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    if (meta.get("path") == "user") != has_user_state(_user_env(env=env)):
        raise SnapshotUnsupported(f"a {meta.get('path', 'mpe2')} snapshot cannot be restored into "
                                  f"{type(getattr(env, 'env', env)).__name__} (env.id changed?)")
    if meta.get("path") == "user":
        _restore_user(env=env, arrays=arrays, meta=meta)
        return
    parallel, order, raw = _layers(env=env)
    arrays = _unpack(flat=arrays["flat"], layout=meta["layout"])
    entities = list(raw.world.agents) + list(raw.world.landmarks)
    if len(entities) != len(meta["entities"]):
        raise ValueError(f"the snapshot has {len(meta['entities'])} entities, this env {len(entities)} "
                         "(env.kwargs changed?)")
    for i, (entity, parts) in enumerate(zip(entities, meta["entities"])):
        for part, obj in _entity_parts(entity=entity):
            for name, saved in parts[part].items():
                if "array" in saved:
                    value: Any = np.array(arrays[f"e{i}.{part}.{name}"])
                elif "entity" in saved:
                    value = entities[saved["entity"]]
                else:
                    value = saved["value"]
                setattr(obj, name, value)
    raw.steps, raw.agents, raw.agent_selection = meta["steps"], list(meta["agents"]), meta["agent_selection"]
    for name, value in meta["selector"].items():
        setattr(raw._agent_selector, name, list(value) if isinstance(value, list) else value)
    for name, values in meta["flags"].items():
        setattr(raw, name, dict(values))
    raw.infos = meta["infos"]
    raw.current_actions = [np.array(arrays[f"current_action.{j}"]) if f"current_action.{j}" in arrays else None
                           for j in range(meta["num_current_actions"])]
    raw.np_random.bit_generator.state = meta["rng"]
    parallel.agents = list(meta["parallel_agents"])
    order._has_reset, order._has_updated = meta["order"]["has_reset"], meta["order"]["has_updated"]
    checker = meta["checker"]
    env._episode, env._step, env._seeded = checker["episode"], checker["step"], checker["seeded"]
    env.latest_observations = {key.split(".", 1)[1]: np.array(value) for key, value in arrays.items()
                               if key.startswith("latest_obs.")}


def _capture_user(*, env: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    raw = _user_env(env=env)
    arrays = user_state_arrays(raw=raw)
    arrays.update({f"latest_obs.{agent}": np.array(obs) for agent, obs in env.latest_observations.items()})
    flat, layout = _pack(arrays=arrays, env_name=type(raw).__name__)
    return {"flat": flat}, {"path": "user", "layout": layout, "agents": list(raw.agents),
                            "checker": {"episode": env._episode, "step": env._step, "seeded": env._seeded}}


def _restore_user(*, env: Any, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    arrays = _unpack(flat=arrays["flat"], layout=meta["layout"])
    raw = _user_env(env=env)
    raw.set_state({name[len("user."):]: value for name, value in arrays.items() if name.startswith("user.")})
    raw.agents = list(meta["agents"])
    checker = meta["checker"]
    env._episode, env._step, env._seeded = checker["episode"], checker["step"], checker["seeded"]
    env.latest_observations = {key.split(".", 1)[1]: np.array(value) for key, value in arrays.items()
                               if key.startswith("latest_obs.")}


def _pack(*, arrays: dict[str, np.ndarray], env_name: str) -> tuple[np.ndarray, list[list[Any]]]:
    """Every array in one float64 vector (exact for the bool, integer and float32/64 values an mpe2 world holds),
    and the layout to cut it back: a snapshot of ~40 small arrays per env would cost the codec more than the
    values themselves."""
    layout = []
    for name, value in arrays.items():
        if value.dtype.kind not in "biuf" or (value.dtype.kind in "iu" and value.size
                                              and np.abs(value).max() >= 2**53):
            raise SnapshotUnsupported(f"no state snapshot for {env_name}: {name} has dtype {value.dtype}")
        layout.append([name, list(value.shape), value.dtype.str])
    flat = np.concatenate([value.astype(np.float64).ravel() for value in arrays.values()]) if arrays \
        else np.zeros(0, np.float64)
    return flat, layout


def _unpack(*, flat: np.ndarray, layout: list[list[Any]]) -> dict[str, np.ndarray]:
    arrays, offset = {}, 0
    for name, shape, dtype in layout:
        size = int(np.prod(shape)) if shape else 1
        arrays[name] = flat[offset:offset + size].astype(np.dtype(dtype)).reshape(shape)
        offset += size
    return arrays


def _user_env(*, env: Any) -> Any:
    """The user's env under the contract checker and nimbus's own stateless wrappers (envs/masks.py's mask split,
    envs/parallel_images.py's scaling)."""
    inner = getattr(env, "env", None)
    while isinstance(inner, (SplitActionMask, ScaleUint8Observations)):
        inner = inner.env
    return inner


def _layers(*, env: Any) -> tuple[Any, Any, Any]:
    """The aec_to_parallel wrapper, the order-enforcing wrapper and the raw mpe2 env under ``env``."""
    parallel = _user_env(env=env)
    aec = getattr(parallel, "aec_env", None)
    raw = getattr(aec, "unwrapped", None)
    if aec is None or not hasattr(aec, "_has_reset") or not (hasattr(raw, "world") and hasattr(raw, "scenario")) \
            or not type(raw).__module__.startswith("mpe2"):
        user = next(layer for layer in (raw, parallel, env) if layer is not None)   # the user's class, not nimbus's
        raise SnapshotUnsupported(f"no state snapshot for {type(user).__name__} (only mpe2 envs and envs whose "
                                  "class defines get_state() and set_state(state) can be restored in another worker)")
    return parallel, aec, raw


def _entity_parts(*, entity: Any) -> list[tuple[str, Any]]:
    return [(part, entity if part == "entity" else getattr(entity, part)) for part in _PARTS
            if part == "entity" or getattr(entity, part, None) is not None]


def _plain(value: Any) -> Any:
    """A JSON-able copy of rewards, flags and infos (numpy scalars become Python numbers)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise SnapshotUnsupported(f"no state snapshot for a value of type {type(value).__name__}")
