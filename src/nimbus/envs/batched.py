"""An actor's envs stepped in one call (``actors.env_backend``): EnvPool (C++) where it has the env, gymnasium's
vector API for the rest, or the per-env loop.

Every backend returns the same batch of arrays per step, with gymnasium's same-step autoreset: an env whose
episode ended in this step (terminated or truncated) is reset at once, ``final_obs`` holds the observation the step
returned and ``next_obs`` the first observation of the new episode (what the policy sees next). Env i of a batch
seeded ``seed`` starts from seed ``seed + i``; later episodes continue each env's generator.

* ``loop``: the per-env Python loop over ``make_env`` envs (the ``gymnasium`` backend; roles/actor.py's step_all
  does the same for the actors that do not batch).
* ``vector``: ``gymnasium.vector.SyncVectorEnv`` over the same ``make_env`` envs, ``AutoresetMode.SAME_STEP``: its
  trajectories equal the loop's bit for bit, and its envs can be snapshotted (exact resume).
* ``envpool``: ``envpool.make_gymnasium`` for the EnvPool twin of a gymnasium id (``envpool_task``). EnvPool resets
  an ended env on the *next* step (gymnasium's NEXT_STEP mode, the step's action ignored); this module resets it at
  once with ``reset(env_id=ended)``, so the rows are those of same-step autoreset and no row is a reset step. Its
  simulators are EnvPool's own builds: same spaces and time limits as gymnasium's, different random streams, and its
  MuJoCo and ALE versions are not gymnasium's (docs/envs.md lists the differences). Its state cannot be
  snapshotted, so it cannot serve ``train.exact_resume`` or ``actors.restore_slots`` (a config error).

Example::

    batch = make_batched(backend="envpool", env_id="CartPole-v1", num_envs=8, seed=3)
    obs = batch.reset()                                   # [8, 4]
    step = batch.step(actions=np.zeros(8, dtype=np.int64))
    step["next_obs"], step["final_obs"], step["rewards"], step["terminated"], step["truncated"]
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from nimbus.envs.make import make_env

Backend = Literal["gymnasium", "vector", "envpool", "auto"]
Step = dict[str, np.ndarray]

# gymnasium id -> (EnvPool task id, EnvPool kwargs that give the gymnasium env's definition); config/rules.py's
# ENVPOOL_TWIN_IDS lists the same ids (the config layer cannot import this one; a test keeps them equal)
_ATARI = {"repeat_action_probability": 0.25,  # ALE v5's sticky actions; EnvPool's default is 0
          "episodic_life": False, "reward_clip": False, "noop_max": 30, "stack_num": 4, "img_height": 84,
          "img_width": 84, "gray_scale": True, "use_fire_reset": False}
ENVPOOL_TWINS: dict[str, tuple[str, dict[str, Any]]] = {
    "CartPole-v1": ("CartPole-v1", {}), "Acrobot-v1": ("Acrobot-v1", {}), "Pendulum-v1": ("Pendulum-v1", {}),
    "MountainCar-v0": ("MountainCar-v0", {}), "Hopper-v5": ("Hopper-v5", {}),
    "HalfCheetah-v5": ("HalfCheetah-v5", {}), "Walker2d-v5": ("Walker2d-v5", {}), "Ant-v5": ("Ant-v5", {}),
    **{f"nimbus/Atari{game}-v5": (f"{game}-v5", _ATARI)
       for game in ("Pong", "Breakout", "BeamRider", "Qbert", "SpaceInvaders")},
}


@functools.cache
def envpool_installed() -> bool:
    """Whether the ``envpool`` extra is importable here (without importing it: that takes ~1.5 s)."""
    return importlib.util.find_spec("envpool") is not None


def envpool_task(*, env_id: str) -> tuple[str, dict[str, Any]] | None:
    """The EnvPool task id and kwargs of a gymnasium id, or None where EnvPool has no twin of it."""
    return ENVPOOL_TWINS.get(env_id)


def envpool_kwargs(*, env_id: str, kwargs: dict[str, Any] | None) -> dict[str, Any] | None:
    """EnvPool's kwargs for ``env_id`` with ``env.kwargs``, or None where EnvPool cannot build that env: no twin, or
    an ``env.kwargs`` key it has no equivalent of (the Atari ids' ``clip_rewards`` is its ``reward_clip``)."""
    twin = envpool_task(env_id=env_id)
    kwargs = kwargs or {}
    if twin is None or not set(kwargs) <= ({"clip_rewards"} if env_id.startswith("nimbus/Atari") else set()):
        return None
    return {**twin[1], **({"reward_clip": bool(kwargs["clip_rewards"])} if "clip_rewards" in kwargs else {})}


def resolve_backend(*, backend: Backend, env_id: str, kwargs: dict[str, Any] | None = None, custom: bool = False,
                    snapshots: bool = False) -> str:
    """The backend ``auto`` stands for: envpool where it is installed and can build the env (``envpool_kwargs``),
    and neither a user's imports or wrappers (``custom``) nor env snapshots need the gymnasium envs; else the loop."""
    if backend != "auto":
        return backend
    usable = envpool_installed() and envpool_kwargs(env_id=env_id, kwargs=kwargs) is not None and not custom \
        and not snapshots
    return "envpool" if usable else "gymnasium"


def make_batched(*, backend: str, env_id: str, num_envs: int, seed: int, kwargs: dict[str, Any] | None = None,
                 actor_rank: int = 0, imports: Sequence[str] = (), wrappers: Sequence[str] = ()) -> Any:
    """``num_envs`` envs of ``env_id`` as one batch (``loop`` for the gymnasium backend, ``vector``, ``envpool``)."""
    if backend == "envpool":
        return EnvPoolBatch(env_id=env_id, num_envs=num_envs, seed=seed, kwargs=kwargs)
    envs = [make_env(env_id=env_id, seed=(seed + i) % (2**31), kwargs=kwargs, actor_rank=actor_rank, imports=imports,
                     wrappers=wrappers) for i in range(num_envs)]
    return VectorBatch(envs=envs, seed=seed) if backend == "vector" else LoopBatch(envs=envs, seed=seed)


class LoopBatch:
    """The per-env loop: ``envs`` stepped one by one, an ended one reset at once."""

    def __init__(self, *, envs: list[gym.Env], seed: int) -> None:
        self.envs, self.num_envs, self._seed = envs, len(envs), seed
        self.observation_space, self.action_space = envs[0].observation_space, envs[0].action_space

    def reset(self) -> np.ndarray:
        return np.stack([env.reset(seed=(self._seed + i) % (2**31))[0] for i, env in enumerate(self.envs)])

    def step(self, *, actions: np.ndarray) -> Step:
        first = self.envs[0].observation_space
        next_obs = np.empty((self.num_envs, *first.shape), dtype=first.dtype)
        final_obs = np.empty_like(next_obs)
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        for i, env in enumerate(self.envs):
            obs, reward, term, trunc, _ = env.step(actions[i].item() if actions[i].ndim == 0 else actions[i])
            rewards[i], terminated[i], truncated[i], final_obs[i] = reward, term, trunc, obs
            next_obs[i] = env.reset()[0] if (term or trunc) else obs
        return {"next_obs": next_obs, "final_obs": final_obs, "rewards": rewards, "terminated": terminated,
                "truncated": truncated}

    def close(self) -> None:
        for env in self.envs:
            env.close()


class VectorBatch(LoopBatch):
    """gymnasium's SyncVectorEnv over ``make_env`` envs, same-step autoreset."""

    def __init__(self, *, envs: list[gym.Env], seed: int) -> None:
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        super().__init__(envs=envs, seed=seed)
        self._vector = SyncVectorEnv([functools.partial(_same, env) for env in envs],
                                     autoreset_mode=AutoresetMode.SAME_STEP)
        self.envs = list(self._vector.envs)   # the same objects: snapshots capture and restore them

    def reset(self) -> np.ndarray:
        return self._vector.reset(seed=[(self._seed + i) % (2**31) for i in range(self.num_envs)])[0]

    def step(self, *, actions: np.ndarray) -> Step:
        obs, rewards, terminated, truncated, infos = self._vector.step(actions)
        final_obs = np.array(obs)
        for i in np.flatnonzero(infos.get("_final_obs", ())):
            final_obs[i] = infos["final_obs"][i]
        return {"next_obs": obs, "final_obs": final_obs, "rewards": rewards.astype(np.float32),
                "terminated": terminated, "truncated": truncated}

    def close(self) -> None:
        self._vector.close()


def _same(env: gym.Env) -> gym.Env:
    return env


class EnvPoolBatch:
    """EnvPool's C++ envs (one thread: an actor function holds one core), with same-step autoreset."""

    envs: list[gym.Env] = []   # nothing a snapshot could capture

    def __init__(self, *, env_id: str, num_envs: int, seed: int, kwargs: dict[str, Any] | None = None) -> None:
        import envpool

        task_kwargs = envpool_kwargs(env_id=env_id, kwargs=kwargs)
        if task_kwargs is None:
            raise ValueError(f"EnvPool cannot build {env_id!r} with env.kwargs {kwargs or {}}; it has twins of "
                             f"{', '.join(sorted(ENVPOOL_TWINS))} (Atari: env.kwargs clip_rewards only)")
        task_id = ENVPOOL_TWINS[env_id][0]
        self.num_envs = num_envs
        self._pool = envpool.make_gymnasium(task_id, num_envs=num_envs, batch_size=num_envs, num_threads=1,
                                            seed=seed % (2**31 - num_envs), **task_kwargs)
        self.observation_space, self.action_space = self._pool.observation_space, self._pool.action_space
        self._discrete = isinstance(self.action_space, gym.spaces.Discrete)

    def reset(self) -> np.ndarray:
        return self._pool.reset()[0]

    def step(self, *, actions: np.ndarray) -> Step:
        actions = actions.astype(np.int32) if self._discrete else actions
        obs, rewards, terminated, truncated, info = self._pool.step(actions)
        order = np.argsort(info["env_id"])            # rows in env order (a synchronous pool keeps it; cheap to check)
        obs, rewards, terminated, truncated = obs[order], rewards[order], terminated[order], truncated[order]
        final_obs = obs
        ended = np.flatnonzero(terminated | truncated)
        if len(ended):
            next_obs = obs.copy()
            reset_obs, reset_info = self._pool.reset(ended.astype(np.int32))
            next_obs[reset_info["env_id"]] = reset_obs
        else:
            next_obs = obs
        return {"next_obs": next_obs, "final_obs": final_obs, "rewards": rewards.astype(np.float32),
                "terminated": terminated.astype(bool), "truncated": truncated.astype(bool)}

    def close(self) -> None:
        self._pool.close()
