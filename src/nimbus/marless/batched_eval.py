"""Greedy multi-agent evaluation, many episodes at once (marless/evaluate.py's path without exploration or video).

Episode ``k`` is played on an env reset with seed ``seed + k``, as one-at-a-time evaluation plays it, but up to
``len(envs)`` episodes run together (``NUM_ENVS`` in evaluation): each step, every live env's agents are grouped by
policy (and by whether the env gives them an action mask), each group takes one forward pass, then every env steps.
An env whose episode ends starts the next unplayed episode (roles/together.py, which roles/evaluate.py's greedy
evaluation of one policy shares; forwards on one torch thread). Greedy actions draw no random numbers, so an episode's
actions depend only on its seed and the policies, not on which env plays it or beside which episodes, except that a
forward over many rows sums in another order than a one-row forward: arg-max (Discrete) actions are those of
one-at-a-time play unless two scores tie to rounding, Box actions agree to rounding
(tests/unit/marless/test_batched_eval.py). This needs an env whose ``reset(seed=...)`` determines the episode
(PettingZoo's contract).

Example::

    envs = [make_parallel_env(...) for _ in range(NUM_ENVS)]
    returns = play_greedy(envs=envs, algo=algo, models={"p": model}, agent_policy={"agent_0": "p", ...},
                          agent_order=["agent_0", ...], agent_id=False, episodes=100, seed=30_000)
    returns[7]["agent_0"]          # agent_0's return in episode 7 (seed 30_007)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nimbus.envs.masks import masks_from
from nimbus.marless.agent_id import append_agent_id
from nimbus.roles.together import play_together

NUM_ENVS = 32   # episodes played together (100 greedy simple_spread episodes: 2.5 s one at a time, see docs/marless.md)


@dataclass(eq=False)
class _Episode:
    """One env and the episode it is playing (roles/together.py)."""

    env: Any
    obs: dict[str, Any]
    infos: dict[str, Any]
    returns: dict[str, float]
    over: bool = False


def play_greedy(*, envs: list[Any], algo: Any, models: dict[str, torch.nn.Module],
                agent_policy: dict[str, str], agent_order: list[str], agent_id: bool, episodes: int,
                seed: int) -> list[dict[str, float]]:
    """Each episode's per-agent returns (keys in ``agent_policy`` order), in episode order, played on ``envs`` (built
    alike; the caller closes them); ``agent_order``: the env's sorted agents (the one-hot's index when ``agent_id``)."""
    def start(*, env: Any, seed: int) -> _Episode:   # seed: the episode's; one whose reset leaves no agent is over
        obs, infos = env.reset(seed=seed)
        return _Episode(env=env, obs=obs, infos=infos, returns={agent: 0.0 for agent in agent_policy},
                        over=not env.agents)

    def act(live: list[_Episode]) -> list[dict[str, Any]]:
        return _greedy_actions(slots=live, algo=algo, models=models, agent_policy=agent_policy,
                               agent_order=agent_order, agent_id=agent_id)

    played = play_together(envs=envs, episodes=episodes, seed=seed, start=start, act=act, step=_step)
    return [episode.returns for episode in played]


def _step(episode: _Episode, actions: dict[str, Any]) -> None:
    episode.obs, rewards, _, _, episode.infos = episode.env.step(actions)
    for agent, reward in rewards.items():
        episode.returns[agent] += float(reward)
    episode.over = not episode.env.agents


def _greedy_actions(*, slots: list[_Episode], algo: Any, models: dict[str, torch.nn.Module],
                   agent_policy: dict[str, str], agent_order: list[str], agent_id: bool) -> list[dict[str, Any]]:
    """Each slot's live agents' greedy actions: one forward per (policy, masked) group over every slot."""
    groups: dict[tuple[str, bool], list[tuple[int, str, np.ndarray | None]]] = {}
    for position, slot in enumerate(slots):
        masks = masks_from(infos=slot.infos)
        for agent in slot.env.agents:
            mask = masks.get(agent)
            groups.setdefault((agent_policy[agent], mask is not None), []).append((position, agent, mask))
    actions: list[dict[str, Any]] = [{} for _ in slots]
    with torch.no_grad():
        for (policy, masked), members in groups.items():
            inputs = np.stack([np.asarray(slots[position].obs[agent], dtype=np.float32)
                               for position, agent, _ in members])
            if agent_id:
                inputs = append_agent_id(obs=inputs, agent_index=np.array([agent_order.index(agent)
                                                                          for _, agent, _ in members]),
                                         num_agents=len(agent_order))
            # every member of a masked group has a mask (the group key says so); the filter narrows the type
            extra = {"action_mask": torch.as_tensor(np.stack([mask for _, _, mask in members if mask is not None]))} \
                if masked else {}
            out = algo.act(model=models[policy], explore=False, obs=torch.as_tensor(inputs), **extra)
            for (position, agent, _), action in zip(members, out.actions):
                actions[position][agent] = action.item() if np.ndim(action) == 0 else action
    return actions
