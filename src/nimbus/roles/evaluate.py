"""Evaluate a policy (from the Store or a checkpoint) in the driver process, optionally recording video.

``nimbus eval RUN_DIR --video`` records every evaluation episode with gymnasium's ``RecordVideo``
(``render_mode="rgb_array"``) into ``RUN_DIR/videos/``. Where frames cannot be rendered (a headless
machine without GL for MuJoCo, no pygame for classic control, no moviepy to write the files) it warns
once and evaluates without video.

Example::

    result = evaluate_checkpoint(path=run_dir, episodes=10)
    result.mean_return
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.base import Algorithm
from nimbus.algos.registry import make_algorithm
from nimbus.config import NimbusConfig, parse_config
from nimbus.config.renamed import workflow_value
from nimbus.data.checkpoint import load_checkpoint, saved_policies
from nimbus.data.codec import Message
from nimbus.envs.make import make_env
from nimbus.envs.normalize import RunningMeanStd
from nimbus.envs.obsnorm import normalize, rms_from_extras
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import CheckpointError
from nimbus.models.distributions import clip_action
from nimbus.models.weights import load_model
from nimbus.roles.together import play_together

log = logging.getLogger(__name__)
NUM_ENVS = 16   # greedy evaluation: episodes played together


@dataclass(frozen=True)
class EvalResult:
    mean_return: float
    std_return: float
    returns: list[float]
    policy_version: int
    video_dir: Path | None = None   # where the episodes were recorded; None without --video or without frames


@dataclass(frozen=True)
class LoadedPolicy:
    """A trained policy as ``nimbus eval`` runs it: normalise observations, act, clip to the action space."""

    algo: Algorithm
    model: torch.nn.Module
    rms: RunningMeanStd | None
    spaces: EnvSpaces

    def actions(self, *, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Actions for a batch of raw observations (batch-first), as sent to ``env.step``."""
        with torch.no_grad():
            out = self.algo.act(model=self.model, obs=torch.as_tensor(normalize(rms=self.rms, obs=obs),
                                                                      dtype=torch.float32), explore=explore)
        return clip_action(action=out.actions, space=self.spaces.action)


def load_policy(*, config: NimbusConfig, weights: Message, spaces: EnvSpaces) -> LoadedPolicy:
    algo = make_algorithm(config=config.algo)
    model = algo.make_model(spaces=spaces)
    extras = load_model(model=model, message=weights)
    rms = rms_from_extras(extras=extras) if getattr(config.algo, "normalize_obs", False) else None
    return LoadedPolicy(algo=algo, model=model.eval(), rms=rms, spaces=spaces)


def evaluate_policy(*, config: NimbusConfig, weights: Message, episodes: int, seed: int,
                    explore: bool = True, video_dir: Path | None = None) -> EvalResult:
    """Run ``episodes`` full episodes with the policy in ``weights`` (stochastic unless explore=False)."""
    kwargs: dict[str, Any] = {**config.env.kwargs, **({"render_mode": "rgb_array"} if video_dir else {})}
    env = make_env(env_id=config.env.id, seed=seed, kwargs=kwargs, imports=config.env.imports,
                   wrappers=config.env.wrappers)
    policy = load_policy(config=config, weights=weights,
                         spaces=EnvSpaces(observation=env.observation_space, action=env.action_space))
    if video_dir is not None:
        env, video_dir = _with_video(env=env, video_dir=video_dir, seed=seed)
    torch.manual_seed(seed)
    if explore or video_dir is not None:
        returns = _one_at_a_time(env=env, policy=policy, episodes=episodes, seed=seed, explore=explore)
    else:   # greedy: NUM_ENVS episodes at once, env is the first of them
        envs = [env] + [make_env(env_id=config.env.id, seed=seed, kwargs=kwargs, imports=config.env.imports,
                                 wrappers=config.env.wrappers) for _ in range(min(NUM_ENVS, episodes) - 1)]
        try:
            returns = _greedy_together(envs=envs, policy=policy, episodes=episodes, seed=seed)
        finally:
            for other in envs[1:]:
                other.close()
    env.close()
    return EvalResult(mean_return=float(np.mean(returns)), std_return=float(np.std(returns)), returns=returns,
                      policy_version=int(weights.header.get("policy_version", -1)), video_dir=video_dir)


def _one_at_a_time(*, env: gym.Env, policy: LoadedPolicy, episodes: int, seed: int, explore: bool) -> list[float]:
    """Each episode's return, episode k reset with seed + k, one after another (sampling draws from torch's RNG in
    this order; the video wrapper records each)."""
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            action = policy.actions(obs=obs[None], explore=explore)[0]
            obs, reward, terminated, truncated, _ = env.step(action.item() if action.ndim == 0 else action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


@dataclass(eq=False)
class _Episode:
    """One greedy episode played together with others (roles/together.py): its env, last observation and return."""

    env: gym.Env
    obs: np.ndarray
    total: float = 0.0
    over: bool = False


def _greedy_together(*, envs: list[gym.Env], policy: LoadedPolicy, episodes: int, seed: int) -> list[float]:
    """Each greedy episode's return, episode k reset with seed + k as one at a time, ``len(envs)`` episodes stepped
    together with one forward per step (roles/together.py). Greedy actions draw no random numbers, so the episodes
    are those of one-at-a-time play, up to the rounding of a forward over many rows (an arg-max flips only where two
    actions tie to rounding; Box actions move in their last bits)."""
    played = play_together(envs=envs, episodes=episodes, seed=seed, start=_start, step=_step,
                           act=lambda live: policy.actions(obs=np.stack([episode.obs for episode in live]),
                                                           explore=False))
    return [episode.total for episode in played]


def _start(*, env: gym.Env, seed: int) -> _Episode:
    return _Episode(env=env, obs=env.reset(seed=seed)[0])


def _step(episode: _Episode, action: np.ndarray) -> None:
    episode.obs, reward, terminated, truncated, _ = episode.env.step(action.item() if action.ndim == 0 else action)
    episode.total += float(reward)
    episode.over = terminated or truncated


def _with_video(*, env: gym.Env, video_dir: Path, seed: int) -> tuple[gym.Env, Path | None]:
    """``env`` recording every episode into ``video_dir``; unchanged, with one warning, where it cannot render."""
    try:
        env.reset(seed=seed)
        frame = env.render()
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise RuntimeError(f"render() returned {type(frame).__name__}, not an RGB frame")
        recorder = gym.wrappers.RecordVideo(env, video_folder=str(video_dir), episode_trigger=lambda _: True,
                                            name_prefix="eval", disable_logger=True)
    except Exception as err:  # noqa: BLE001 - no GL, no pygame, no moviepy: evaluation goes on without video
        log.warning("no video: this machine cannot render %s (%s: %s); evaluating without it. Video needs "
                    "`pip install nimbus-rl[video]` and, for MuJoCo, an OpenGL backend (MUJOCO_GL=egl)",
                    env.spec.id if env.spec else "the env", type(err).__name__, err)
        return env, None
    return recorder, video_dir


def evaluate_checkpoint(*, path: Path, episodes: int, seed: int = 12345, explore: bool = True,
                        video: bool = False) -> EvalResult:
    """Load the newest verified checkpoint under ``path`` (a run dir, checkpoints dir, or ckpt dir);
    ``video``: record the episodes into ``<run dir>/videos``."""
    state = load_checkpoint(path=path)
    if workflow_value(state.config.get("train", {}).get("workflow"), warn=False) == "marless":   # or multiagent
        raise CheckpointError(f"{path} holds one policy of a multi-agent run: evaluate the run directory, whose "
                              "agents act together (marless/evaluate.py)")
    config = parse_config(data=state.config)
    return evaluate_policy(config=config, weights=state.weights, episodes=episodes, seed=seed, explore=explore,
                           video_dir=_run_dir(path=Path(path)) / "videos" if video else None)


def member_directories(*, path: Path) -> list[Path]:
    """A run of several policies (``policies:``, ``pbt:``): each member's directory, ``policies/<name>``;
    empty for any other path."""
    if (Path(path) / "checkpoints").is_dir():
        return []
    return [Path(path) / "policies" / name for name in saved_policies(run_dir=path)]


def _run_dir(*, path: Path) -> Path:
    """The run directory of a run, checkpoints or checkpoint directory."""
    if path.name.startswith("ckpt-"):
        path = path.parent
    return path.parent if path.name == "checkpoints" else path
