"""Bring your own env: user modules, ``module:EnvId`` ids, observation wrappers, and the space check.

A user's env reaches nimbus in one of two ways, both imported in the driver and again in every worker
before the env is made:

- gymnasium's own ``module:EnvId`` form in ``env.id`` (gymnasium imports ``module``, which registers
  ``EnvId``);
- ``env.imports: [mypkg.envs]``, modules imported first (each registers its ids with
  ``gymnasium.register``), then ``env.id: MyEnv-v0``.

``env.wrappers`` names gymnasium wrappers applied outermost, in order, e.g.
``gymnasium.wrappers.FlattenObservation`` for a Dict, Tuple or Discrete observation space. Modules are
found on ``sys.path`` plus the current directory, as ``python -m`` finds them.

The networks nimbus builds read a Box observation; `check_observation_space` refuses anything else
with the space and the fix, before a worker starts.

Example::

    import_modules(modules=("mypkg.envs",), key="env.imports")
    env = apply_wrappers(env=env, wrappers=("gymnasium.wrappers.FlattenObservation",))
    check_observation_space(space=env.observation_space, env_id="MyEnv-v0")
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from nimbus.errors import ConfigError

FLATTEN = "gymnasium.wrappers.FlattenObservation"
_FLATTENABLE = (gym.spaces.Dict, gym.spaces.Tuple, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                gym.spaces.MultiBinary)


def _with_cwd_on_path() -> None:
    """The console script's sys.path lacks the working directory, which ``python -m`` (the workers) has."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def import_modules(*, modules: Sequence[str], key: str) -> None:
    """Import each module (registering its envs); a failure is a ConfigError naming ``key``."""
    _with_cwd_on_path()
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ConfigError(f"{key}: cannot import module {name!r} ({err}); it must be importable from the "
                              "current directory or PYTHONPATH, in the driver and in every worker") from err


def resolve(*, ref: str, key: str) -> Any:
    """The object ``ref`` names: ``pkg.mod:Name`` or ``pkg.mod.Name``. A ConfigError names ``key`` if absent."""
    module_name, sep, attr = ref.partition(":") if ":" in ref else ref.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"{key}: {ref!r} is not a reference to an object; write pkg.module:Name")
    import_modules(modules=(module_name,), key=key)
    target: Any = sys.modules[module_name]
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{key}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    return target


def registered_id(*, env_id: str) -> str:
    """For ``module:EnvId``, import ``module`` and return ``EnvId``; other ids unchanged."""
    if ":" not in env_id:
        return env_id
    module_name, _, name = env_id.partition(":")
    import_modules(modules=(module_name,), key="env.id")
    return name


def apply_wrappers(*, env: gym.Env, wrappers: Sequence[str]) -> gym.Env:
    """``env`` wrapped by each named wrapper class in order (the last named is outermost)."""
    for ref in wrappers:
        wrapper = resolve(ref=ref, key="env.wrappers")
        if not (isinstance(wrapper, type) and issubclass(wrapper, gym.Wrapper)):
            raise ConfigError(f"env.wrappers: {ref!r} is not a gymnasium.Wrapper subclass")
        env = wrapper(env)
    return env


def check_observation_space(*, space: gym.Space, env_id: str) -> None:
    """Refuse an observation space the networks cannot read (anything but a Box), naming the fix."""
    if isinstance(space, gym.spaces.Box):
        return
    if isinstance(space, _FLATTENABLE):
        fix = f"add `env.wrappers: [{FLATTEN}]` to flatten it into a Box"
    else:
        fix = "write a gymnasium.ObservationWrapper that maps it to a Box and name it in env.wrappers"
    raise ConfigError(f"env {env_id!r} has a {type(space).__name__} observation space ({space}); nimbus's "
                      f"networks read a Box observation: {fix}")
