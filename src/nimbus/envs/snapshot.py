"""Env state snapshots for exact resume (RELIABILITY.md P9), without pickling the env.

An env built by ``make_env`` is ``_SeedOnFirstReset(TimeLimit(ContractChecked(raw)))``. A snapshot holds,
as safetensors-friendly arrays plus a JSON-able dict:

* the wrappers' counters (TimeLimit's elapsed steps, ContractChecked's episode and step, whether the
  first-reset seed is still pending);
* every random generator the env draws from (the env's ``np_random`` and both spaces' generators), as
  numpy's bit-generator state;
* the simulator's state, per family: MuJoCo's full integration state (``mj_getState`` with
  ``mjSTATE_INTEGRATION``: qpos, qvel, act, warm-start, controls, time, ... so the next step is bitwise
  the same), or a classic-control env's ``state`` (plus CartPole's ``steps_beyond_terminated`` and
  Pendulum's ``last_u``).

Any other env raises ``SnapshotUnsupported``; the caller then resumes it with fresh episodes.

Example::

    arrays, meta = capture(env=env)
    restore(env=other, arrays=arrays, meta=meta)      # other: make_env(...) of the same id, reset once
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

from nimbus.envs.checks import ContractChecked
from nimbus.errors import NimbusError

_CLASSIC_EXTRAS = ("steps_beyond_terminated", "last_u")


class SnapshotUnsupported(NimbusError):
    """This env's state cannot be captured without pickling it (not retried: it would fail the same way)."""

    nimbus_retryable = False


def capture(*, env: gym.Env) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    raw = env.unwrapped
    meta: dict[str, Any] = {"wrappers": _wrapper_counters(env=env), "rng": _generator_states(env=env)}
    arrays: dict[str, np.ndarray] = {}
    if _is_mujoco(raw):
        import mujoco

        state = np.empty(mujoco.mj_stateSize(raw.model, mujoco.mjtState.mjSTATE_INTEGRATION), np.float64)
        mujoco.mj_getState(raw.model, raw.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
        arrays["mujoco"] = state
    elif getattr(raw, "state", None) is not None and np.asarray(raw.state).dtype.kind == "f":
        arrays["state"] = np.array(raw.state, dtype=np.asarray(raw.state).dtype)
        meta["state_is_tuple"] = isinstance(raw.state, tuple)
        meta["extras"] = {name: _plain(getattr(raw, name)) for name in _CLASSIC_EXTRAS if hasattr(raw, name)}
    else:
        raise SnapshotUnsupported(f"no state snapshot for {type(raw).__name__} (only MuJoCo and classic-control "
                                  "envs can be resumed exactly)")
    return arrays, meta


def restore(*, env: gym.Env, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    raw = env.unwrapped
    if "mujoco" in arrays:
        import mujoco

        mujoco.mj_setState(raw.model, raw.data, np.asarray(arrays["mujoco"], np.float64),
                           mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(raw.model, raw.data)  # derived quantities (positions of bodies, contacts) as after a step
    else:
        state = np.array(arrays["state"])
        raw.state = tuple(state.tolist()) if meta.get("state_is_tuple") else state
        for name, value in meta.get("extras", {}).items():
            setattr(raw, name, np.asarray(value, np.float32) if isinstance(value, list) else value)
    _set_wrapper_counters(env=env, counters=meta["wrappers"])
    _set_generator_states(env=env, states=meta["rng"])


def _is_mujoco(raw: gym.Env) -> bool:
    return hasattr(raw, "model") and hasattr(raw, "data") and type(raw.data).__module__.startswith("mujoco")


def _plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray) else (None if value is None else float(value)
                                                                 if isinstance(value, (float, np.floating))
                                                                 else int(value))


def _layers(env: gym.Env) -> list[gym.Env]:
    layers = []
    while isinstance(env, gym.Wrapper):
        layers.append(env)
        env = env.env
    return layers


def _wrapper_counters(*, env: gym.Env) -> dict[str, Any]:
    counters: dict[str, Any] = {}
    for layer in _layers(env):
        if isinstance(layer, TimeLimit):
            counters["elapsed_steps"] = layer._elapsed_steps
        elif isinstance(layer, ContractChecked):
            counters["episode"], counters["step"] = layer._episode, layer._step
        elif hasattr(layer, "_pending_seed"):
            counters["pending_seed"] = layer._pending_seed
    return counters


def _set_wrapper_counters(*, env: gym.Env, counters: dict[str, Any]) -> None:
    for layer in _layers(env):
        if isinstance(layer, TimeLimit):
            layer._elapsed_steps = counters["elapsed_steps"]
        elif isinstance(layer, ContractChecked):
            layer._episode, layer._step = counters["episode"], counters["step"]
        elif hasattr(layer, "_pending_seed"):
            layer._pending_seed = counters["pending_seed"]


def _generator_states(*, env: gym.Env) -> dict[str, Any]:
    return {"env": env.unwrapped.np_random.bit_generator.state,
            "action_space": env.action_space.np_random.bit_generator.state,
            "observation_space": env.observation_space.np_random.bit_generator.state}


def _set_generator_states(*, env: gym.Env, states: dict[str, Any]) -> None:
    env.unwrapped.np_random.bit_generator.state = states["env"]
    env.action_space.np_random.bit_generator.state = states["action_space"]
    env.observation_space.np_random.bit_generator.state = states["observation_space"]
