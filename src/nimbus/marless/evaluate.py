"""Evaluate a multi-agent run's policies together: at the end of ``train.workflow: marless`` and for
``nimbus eval RUN_DIR`` of such a run.

Every agent acts with the policy the agent→policy map gives it, on a PettingZoo parallel env, for whole episodes,
episode ``k`` on seed ``seed + k`` (with an env that gives action masks, envs/masks.py, an agent acts among its legal
actions only, greedy or sampled from the same masked distribution as in training). An episode's global return is the
mean over agents of their returns (MARLess's metric); each agent's mean return over the episodes is reported beside
it. Greedy evaluation without video (the periodic and final evaluations of a run) plays ``NUM_ENVS`` episodes at
once, one forward per policy per step (marless/batched_eval.py: the same episodes; Box actions agree to rounding);
sampled or filmed episodes are played one after another on one env, so sampling draws from torch's RNG (seeded
``seed``) in a fixed order.

Example::

    result = evaluate_marless_run(path=run_dir, episodes=10, seed=12345, explore=False)
    result.mean_return, result.agent_returns["agent_0"]
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nimbus.algos.multiagent import make_multiagent_algo
from nimbus.config import NimbusConfig
from nimbus.data.codec import Message
from nimbus.envs.masks import masks_from
from nimbus.envs.parallel import agent_spaces, make_parallel_env
from nimbus.envs.spaces import EnvSpaces
from nimbus.marless.agent_id import append_agent_id, uses_agent_id, with_agent_id
from nimbus.marless.batched_eval import NUM_ENVS, play_greedy
from nimbus.marless.checkpoint import is_multiagent, load_run
from nimbus.models.weights import load_model

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MarlessEvalResult:
    mean_return: float                 # global return (mean over agents), mean over episodes
    std_return: float
    returns: list[float]               # each episode's global return
    agent_returns: dict[str, float]    # each agent's mean return over the episodes
    policy_versions: dict[str, int]    # the policy each agent used, at which version ("p_agent_0": 4)
    agent_policy: dict[str, str]
    video_dir: Path | None = None      # where the episodes were recorded; None without video or without frames


def evaluate_agents(*, config: NimbusConfig, algo: Any, weights: dict[str, Message], agent_policy: dict[str, str],
                    episodes: int, seed: int, explore: bool = False,
                    video_dir: Path | None = None) -> MarlessEvalResult:
    """``episodes`` episodes on seeds ``seed``, ``seed + 1``...; ``weights``: each policy in use, by name;
    ``video_dir``: record each episode there as ``eval-episode-<k>.mp4``. Greedy without video, the episodes are
    played many at once (marless/batched_eval.py: the same episodes); otherwise one at a time."""
    torch.manual_seed(seed)
    if explore or video_dir is not None:
        played, filmed = _play_one_at_a_time(config=config, algo=algo, weights=weights, agent_policy=agent_policy,
                                              episodes=episodes, seed=seed, explore=explore, video_dir=video_dir)
    else:
        played, filmed = _play_batched(config=config, algo=algo, weights=weights, agent_policy=agent_policy,
                                       episodes=episodes, seed=seed), False
    totals = [float(np.mean(list(returns.values()))) for returns in played]
    per_agent = {agent: [returns[agent] for returns in played] for agent in sorted(agent_policy)} if played else {}
    return MarlessEvalResult(mean_return=float(np.mean(totals)), std_return=float(np.std(totals)), returns=totals,
                          agent_returns={agent: float(np.mean(values)) for agent, values in per_agent.items()},
                          policy_versions={policy: int(weights[policy].header.get("policy_version", -1))
                                           for policy in sorted(set(agent_policy.values()))},
                          agent_policy=dict(agent_policy), video_dir=video_dir if filmed else None)


def load_policies(*, config: NimbusConfig, algo: Any, weights: dict[str, Message], agent_policy: dict[str, str],
                  spaces: dict[str, EnvSpaces]) -> dict[str, torch.nn.Module]:
    """Each policy in ``agent_policy``'s networks, built for its first agent's spaces (⊕ the agent id where the run
    uses one), in eval mode."""
    agent_id, models = uses_agent_id(marless=config.marless), {}
    for agent, policy in sorted(agent_policy.items()):
        if policy not in models:
            model = algo.make_policy(spaces=with_agent_id(spaces=spaces[agent], num_agents=len(spaces))
                                     if agent_id else spaces[agent])
            load_model(model=model, message=weights[policy])
            models[policy] = model.eval()
    return models


def _play_batched(*, config: NimbusConfig, algo: Any, weights: dict[str, Message], agent_policy: dict[str, str],
                  episodes: int, seed: int) -> list[dict[str, float]]:
    """Each greedy episode's per-agent returns, played ``NUM_ENVS`` at a time (marless/batched_eval.py)."""
    envs = [_make_env(config=config, seed=seed, render=False) for _ in range(max(1, min(NUM_ENVS, episodes)))]
    try:
        spaces = agent_spaces(env=envs[0])
        models = load_policies(config=config, algo=algo, weights=weights, agent_policy=agent_policy, spaces=spaces)
        return play_greedy(envs=envs, algo=algo, models=models, agent_policy=agent_policy, agent_order=sorted(spaces),
                           agent_id=uses_agent_id(marless=config.marless), episodes=episodes, seed=seed)
    finally:
        for env in envs:
            env.close()


def _play_one_at_a_time(*, config: NimbusConfig, algo: Any, weights: dict[str, Message],
                        agent_policy: dict[str, str], episodes: int, seed: int, explore: bool,
                        video_dir: Path | None) -> tuple[list[dict[str, float]], bool]:
    """Each episode's per-agent returns, played one after another on one env (sampled actions draw from torch's
    RNG in this order); whether they were filmed."""
    env = _make_env(config=config, seed=seed, render=video_dir is not None)
    played = []
    try:
        env.reset(seed=seed)
        recorder = _recorder(env=env, video_dir=video_dir) if video_dir is not None else None
        spaces = agent_spaces(env=env)
        order, agent_id = sorted(spaces), uses_agent_id(marless=config.marless)
        models = load_policies(config=config, algo=algo, weights=weights, agent_policy=agent_policy, spaces=spaces)
        for episode in range(episodes):
            obs, infos = env.reset(seed=seed + episode)
            returns = {agent: 0.0 for agent in agent_policy}
            frames = [env.render()] if recorder is not None else []
            while env.agents:
                actions = _actions(agents=env.agents, obs=obs, infos=infos, algo=algo, models=models,
                                   agent_policy=agent_policy, order=order, agent_id=agent_id, explore=explore)
                obs, rewards, _, _, infos = env.step(actions)
                for agent, reward in rewards.items():
                    returns[agent] += float(reward)
                frames += [env.render()] if recorder is not None else []
            if recorder is not None:
                recorder(frames=frames, episode=episode)
            played.append(returns)
    finally:
        env.close()
    return played, recorder is not None


def _actions(*, agents: list[str], obs: dict[str, Any], infos: dict[str, Any], algo: Any,
             models: dict[str, torch.nn.Module], agent_policy: dict[str, str], order: list[str], agent_id: bool,
             explore: bool) -> dict[str, Any]:
    """Each live agent's action, one forward per agent, in ``agents`` order."""
    actions = {}
    with torch.no_grad():
        for agent in agents:
            inputs = np.asarray(obs[agent], dtype=np.float32)[None]
            if agent_id:
                inputs = append_agent_id(obs=inputs, agent_index=np.array([order.index(agent)]), num_agents=len(order))
            mask = masks_from(infos=infos).get(agent)   # greedy among the legal actions only
            out = algo.act(model=models[agent_policy[agent]], explore=explore, obs=torch.as_tensor(inputs)) \
                if mask is None else algo.act(model=models[agent_policy[agent]], explore=explore,
                                              obs=torch.as_tensor(inputs), action_mask=torch.as_tensor(mask)[None])
            action = out.actions[0]
            actions[agent] = action.item() if np.ndim(action) == 0 else action
    return actions


def _make_env(*, config: NimbusConfig, seed: int, render: bool) -> Any:
    kwargs = dict(config.env.kwargs)
    if render:
        try:
            return make_parallel_env(env_id=config.env.id, seed=seed, kwargs={**kwargs, "render_mode": "rgb_array"},
                                     imports=config.env.imports)
        except TypeError as err:   # a factory of your own without render_mode: no frames, _recorder says so
            log.debug("%s does not take render_mode: %s", config.env.id, err)
    return make_parallel_env(env_id=config.env.id, seed=seed, kwargs=kwargs, imports=config.env.imports)


def _recorder(*, env: Any, video_dir: Path) -> Callable[..., None] | None:
    """A function writing one episode's frames as ``video_dir/eval-episode-<k>.mp4``; None, with one warning,
    where the env cannot render (an env of your own without rgb_array, no moviepy)."""
    try:
        from gymnasium.utils.save_video import save_video

        frame = env.render()
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise RuntimeError(f"render() returned {type(frame).__name__}, not an RGB frame")
    except Exception as err:  # noqa: BLE001 - no frames or no moviepy: evaluation goes on without video
        log.warning("no video: %s cannot render (%s: %s); evaluating without it. Video needs "
                    "`pip install nimbus-rl[video]`", env.env_id, type(err).__name__, err)
        return None
    fps = env.metadata.get("render_fps", 10) if isinstance(env.metadata, dict) else 10

    def record(*, frames: list[np.ndarray], episode: int) -> None:
        save_video(frames, str(video_dir), episode_trigger=lambda _: True, episode_index=episode,
                   name_prefix="eval", fps=fps)
    return record


def is_multiagent_run(*, path: Path) -> bool:
    """Whether ``path`` is the directory of a ``train.workflow: marless`` run (its checkpoints' config)."""
    for manifest in sorted((Path(path) / "policies").glob("*/checkpoints/ckpt-*/manifest.json"))[:1]:
        try:
            return is_multiagent(config=json.loads(manifest.read_text())["config"])
        except (OSError, ValueError, KeyError):
            return False
    return False


def evaluate_marless_run(*, path: Path, episodes: int, seed: int, explore: bool = False,
                      video: bool = False) -> MarlessEvalResult:
    """The newest round every policy of the run at ``path`` has a checkpoint of, evaluated with the map it had;
    ``video``: the episodes recorded into ``<run dir>/videos``."""
    run = load_run(path=path)
    return evaluate_agents(config=run.config, algo=make_multiagent_algo(config=run.config.algo),
                           agent_policy=run.agent_policy, episodes=episodes, seed=seed, explore=explore,
                           video_dir=Path(path) / "videos" if video else None,
                           weights={policy: run.states[policy].weights for policy in set(run.agent_policy.values())})
