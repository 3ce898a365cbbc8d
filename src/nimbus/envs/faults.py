"""Fault-injection environments for reliability tests (docs/reliability.md), registered as ``nimbus/*``.

Each wraps CartPole-v1 and misbehaves in one documented way. Counters that must survive worker
restarts live in a file (``counter_path``), updated under an exclusive lock (runtime/faults.py, which
also holds the fault points inside function code).

- ``nimbus/FlakyCartPole-v0``   raises InjectedFault (retried like a dead worker) at step ``fail_at_step`` while the
  counter < ``failures``
- ``nimbus/KillerCartPole-v0``  SIGKILLs its own process at step ``fail_at_step`` while the counter < ``failures``
- ``nimbus/RaisingCartPole-v0`` raises ValueError on every step (the env's own error: not retried by default)
- ``nimbus/NaNCartPole-v0``     returns NaN in ``field`` ("obs" or "reward") at step ``nan_at_step``
- ``nimbus/WrongShapeCartPole-v0`` returns an observation of shape (5,) at step ``bad_at_step``
- ``nimbus/SleepyCartPole-v0``  sleeps ``sleep_s`` (default: forever) at step ``sleep_at_step``
- ``nimbus/OldApiCartPole-v0``  returns gym's old 4-tuple from step()

Example::

    nimbus train configs/ppo-cartpole.yaml --set env.id=nimbus/NaNCartPole-v0 --set env.kwargs.nan_at_step=50
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from nimbus.runtime.faults import InjectedFault, bump_counter


class _FaultyCartPole(CartPoleEnv):
    """CartPole with a step counter; subclasses override ``_misbehave``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.options = kwargs
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        obs, reward, terminated, truncated, info = super().step(action)
        return self._misbehave(obs=obs, reward=float(reward), terminated=terminated, truncated=truncated, info=info)

    def _misbehave(self, **step: Any) -> Any:
        return step["obs"], step["reward"], step["terminated"], step["truncated"], step["info"]


class FlakyCartPole(_FaultyCartPole):
    def _misbehave(self, **step: Any) -> Any:
        if self.steps == self.options.get("fail_at_step", 10) and \
                bump_counter(path=self.options["counter_path"], limit=self.options.get("failures", 2)):
            raise InjectedFault("injected failure (nimbus/FlakyCartPole-v0)")
        return super()._misbehave(**step)


class KillerCartPole(_FaultyCartPole):
    def _misbehave(self, **step: Any) -> Any:
        if self.steps == self.options.get("fail_at_step", 10) and \
                bump_counter(path=self.options["counter_path"], limit=self.options.get("failures", 1)):
            os.kill(os.getpid(), signal.SIGKILL)
        return super()._misbehave(**step)


class RaisingCartPole(_FaultyCartPole):
    def _misbehave(self, **step: Any) -> Any:
        raise ValueError("injected error on every step (nimbus/RaisingCartPole-v0)")


class NaNCartPole(_FaultyCartPole):
    def _misbehave(self, **step: Any) -> Any:
        if self.steps == self.options.get("nan_at_step", 10):
            if self.options.get("field", "obs") == "obs":
                step["obs"] = np.full_like(step["obs"], np.nan)
            else:
                step["reward"] = float("nan")
        return super()._misbehave(**step)


class WrongShapeCartPole(_FaultyCartPole):
    def _misbehave(self, **step: Any) -> Any:
        if self.steps == self.options.get("bad_at_step", 10):
            step["obs"] = np.zeros(5, dtype=np.float32)
        return super()._misbehave(**step)


class SleepyCartPole(_FaultyCartPole):
    def _misbehave(self, **step: Any) -> Any:
        if self.steps == self.options.get("sleep_at_step", 10):
            time.sleep(self.options.get("sleep_s", 10**6))
        return super()._misbehave(**step)


class OldApiCartPole(_FaultyCartPole):
    def _misbehave(self, **step: Any) -> Any:
        return step["obs"], step["reward"], step["terminated"] or step["truncated"], step["info"]


FAULTY_ENVS = {"FlakyCartPole-v0": FlakyCartPole, "KillerCartPole-v0": KillerCartPole,
               "RaisingCartPole-v0": RaisingCartPole, "NaNCartPole-v0": NaNCartPole,
               "WrongShapeCartPole-v0": WrongShapeCartPole, "SleepyCartPole-v0": SleepyCartPole,
               "OldApiCartPole-v0": OldApiCartPole}


def register() -> None:
    """Register every ``nimbus/*`` fault env with gymnasium (idempotent)."""
    for name, cls in FAULTY_ENVS.items():
        env_id = f"nimbus/{name}"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=cls, max_episode_steps=500)


register()
