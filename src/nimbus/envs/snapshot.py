"""Env state snapshots for exact resume (P9, docs/reliability.md), without pickling the env.

An env built by ``make_env`` is ``_SeedOnFirstReset(TimeLimit(ContractChecked(raw)))``. A snapshot holds,
as safetensors-friendly arrays plus a JSON-able dict:

* the wrappers' counters (TimeLimit's elapsed steps, ContractChecked's episode and step, whether the
  first-reset seed is still pending);
* every random generator the env draws from (the env's ``np_random`` and both spaces' generators), as
  numpy's bit-generator state;
* the simulator's state, through one known exact path (``snapshot_path``):

  - ``user``: the env's class defines ``get_state()`` and ``set_state(state)`` (checked first, so a user can
    take over any env). ``get_state()`` returns a dict of names to numeric numpy arrays (or numbers) holding
    everything a step, a reset or a render reads besides the env's ``np_random``; ``set_state(state)`` gets
    that dict back (as arrays) on a freshly made, reset env of the same id and kwargs and must make it
    continue exactly;
  - ``mujoco``: an env class of gymnasium's own MuJoCo package: its full integration state (``mj_getState``
    with ``mjSTATE_INTEGRATION``: qpos, qvel, act, warm-start, controls, time, ... so the next step is
    bitwise the same);
  - ``classic``: exactly gymnasium's CartPole, Pendulum, Acrobot, MountainCar or MountainCarContinuous
    class (not a subclass, which may hold more): its ``state`` (plus CartPole's ``steps_beyond_terminated``
    and Pendulum's ``last_u``).

  Every wrapper between the raw env and the outside must be one whose state is known: nimbus's own
  (first-reset seed, contract checker), ``TimeLimit``, a stateless gymnasium wrapper (``_STATELESS``), or a
  user's wrapper whose class defines ``get_state``/``set_state`` under the same contract.

Any other env raises ``SnapshotUnsupported`` naming the reason (``check_snapshot`` runs a trial capture; the
trainer calls it at build time, so ``actors.restore_slots`` or ``train.exact_resume`` on such an env is a
config error before any worker starts, never a silently wrong restore).

Example::

    arrays, meta = capture(env=env)
    restore(env=other, arrays=arrays, meta=meta)      # other: make_env(...) of the same id, reset once
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

from nimbus.envs.checks import ContractChecked
from nimbus.errors import ConfigError, NimbusError

_CLASSIC_EXTRAS = ("steps_beyond_terminated", "last_u")
_CLASSIC = ("gymnasium.envs.classic_control.cartpole.CartPoleEnv",
            "gymnasium.envs.classic_control.pendulum.PendulumEnv",
            "gymnasium.envs.classic_control.acrobot.AcrobotEnv",
            "gymnasium.envs.classic_control.mountain_car.MountainCarEnv",
            "gymnasium.envs.classic_control.continuous_mountain_car.Continuous_MountainCarEnv")
_STATELESS = frozenset(f"gymnasium.wrappers.{name}" for name in (
    "ClipAction", "ClipReward", "DtypeObservation", "FilterObservation", "FlattenObservation", "RescaleAction",
    "RescaleObservation", "ReshapeObservation", "TransformAction", "TransformObservation", "TransformReward"))
_KNOWN_WRAPPERS = frozenset({"gymnasium.wrappers.common.TimeLimit", "nimbus.envs.checks.ContractChecked",
                             "nimbus.envs.make._SeedOnFirstReset"})


class SnapshotUnsupported(NimbusError):
    """This env's state cannot be captured without pickling it (not retried: it would fail the same way)."""

    nimbus_retryable = False


def snapshot_path(*, env: gym.Env) -> str:
    """How ``env``'s state is captured: ``user``, ``mujoco`` or ``classic`` (module docstring); raises
    SnapshotUnsupported with the reason for any other env or for a wrapper whose state is unknown."""
    raw = env.unwrapped
    for layer in _layers(env):
        name = _qualified(type(layer))
        if name not in _KNOWN_WRAPPERS and _public(name) not in _STATELESS and not has_user_state(layer):
            raise SnapshotUnsupported(f"no state snapshot for {type(raw).__name__}: its wrapper "
                                      f"{type(layer).__name__} may hold state a snapshot cannot see (only TimeLimit "
                                      "and stateless gymnasium wrappers are known)")
    if has_user_state(raw):
        return "user"
    if type(raw).__module__.startswith("gymnasium.envs.mujoco.") and _is_mujoco(raw):
        return "mujoco"
    if _qualified(type(raw)) in _CLASSIC:
        return "classic"
    raise SnapshotUnsupported(f"no state snapshot for {type(raw).__name__} ({_qualified(type(raw))}): only "
                              "gymnasium's classic-control and MuJoCo envs, or an env whose class defines "
                              "get_state() and set_state(state), can be restored exactly")


def check_snapshot(*, env: gym.Env) -> None:
    """Raise SnapshotUnsupported unless ``env`` (made, not yet reset) can be snapshotted: a trial capture after a
    reset, so a ``get_state()`` that returns something else than numeric arrays fails here too."""
    snapshot_path(env=env)
    env.reset()
    capture(env=env)


def capture(*, env: gym.Env) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    raw, path = env.unwrapped, snapshot_path(env=env)
    meta: dict[str, Any] = {"wrappers": _wrapper_counters(env=env), "rng": _generator_states(env=env), "path": path}
    arrays: dict[str, np.ndarray] = {}
    if path == "user":
        arrays.update(user_state_arrays(raw=raw))
    elif path == "mujoco":
        import mujoco

        state = np.empty(mujoco.mj_stateSize(raw.model, mujoco.mjtState.mjSTATE_INTEGRATION), np.float64)
        mujoco.mj_getState(raw.model, raw.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
        arrays["mujoco"] = state
    else:
        arrays["state"] = np.array(raw.state, dtype=np.asarray(raw.state).dtype)
        meta["state_is_tuple"] = isinstance(raw.state, tuple)
        meta["extras"] = {name: _plain(getattr(raw, name)) for name in _CLASSIC_EXTRAS if hasattr(raw, name)}
    for i, layer in enumerate(_layers(env)):
        if has_user_state(layer):  # a user's wrapper under the same contract
            arrays.update({f"wrapper.{i}.{name}": value for name, value in user_state_arrays(raw=layer).items()})
    return arrays, meta


def restore(*, env: gym.Env, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    raw = env.unwrapped
    path = meta.get("path", "mujoco" if "mujoco" in arrays else "classic")
    if path != snapshot_path(env=env):
        raise SnapshotUnsupported(f"a {path} snapshot cannot be restored into {type(raw).__name__} "
                                  f"({snapshot_path(env=env)}): env.id changed?")
    if path == "user":
        raw.set_state({name[len(_USER):]: np.array(value) for name, value in arrays.items()
                       if name.startswith(_USER)})
    elif path == "mujoco":
        import mujoco

        mujoco.mj_setState(raw.model, raw.data, np.asarray(arrays["mujoco"], np.float64),
                           mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(raw.model, raw.data)  # derived quantities (positions of bodies, contacts) as after a step
    else:
        state = np.array(arrays["state"])
        raw.state = tuple(state.tolist()) if meta.get("state_is_tuple") else state
        for name, value in meta.get("extras", {}).items():
            setattr(raw, name, np.asarray(value, np.float32) if isinstance(value, list) else value)
    for i, layer in enumerate(_layers(env)):
        if has_user_state(layer):
            head = f"wrapper.{i}.{_USER}"
            layer.set_state({name[len(head):]: np.array(value) for name, value in arrays.items()
                             if name.startswith(head)})
    _set_wrapper_counters(env=env, counters=meta["wrappers"])
    _set_generator_states(env=env, states=meta["rng"])


_USER = "user."


def has_user_state(obj: Any) -> bool:
    """The class (not a wrapper's attribute forwarding) defines both halves of the user contract."""
    return callable(getattr(type(obj), "get_state", None)) and callable(getattr(type(obj), "set_state", None))


def user_state_arrays(*, raw: gym.Env) -> dict[str, np.ndarray]:
    state = raw.get_state()
    if not isinstance(state, dict):
        raise SnapshotUnsupported(f"no state snapshot for {type(raw).__name__}: get_state() returned "
                                  f"{type(state).__name__}, not a dict of names to numeric arrays")
    arrays = {}
    for name, value in state.items():
        array = np.array(value)
        if not isinstance(name, str) or array.dtype.kind not in "biuf":
            raise SnapshotUnsupported(f"no state snapshot for {type(raw).__name__}: get_state()[{name!r}] is "
                                      f"{type(value).__name__} (dtype {array.dtype}), not a numeric array")
        arrays[f"{_USER}{name}"] = array
    return arrays


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _public(name: str) -> str:
    """gymnasium.wrappers.<x>.<Class> as gymnasium.wrappers.<Class> (the name the package exports)."""
    parts = name.split(".")
    return f"gymnasium.wrappers.{parts[-1]}" if name.startswith("gymnasium.wrappers.") else name


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


def require_snapshot(*, check: Callable[[], None], env_id: str, key: str) -> None:
    """Run ``check`` (a trial capture of a probe env); SnapshotUnsupported becomes a ConfigError (exit 2) naming
    ``key``, the env and the reason, before any worker starts."""
    try:
        check()
    except SnapshotUnsupported as exc:
        raise ConfigError(f"{key}: env {env_id!r} cannot be snapshotted exactly, so its episodes could not go on "
                          f"in another worker: {exc}. Give the env class get_state() and set_state(state) "
                          f"(docs/guide.md, \"Env snapshots\"), or drop {key}") from None
