"""Greedy multi-agent evaluation plays many episodes at once (marless/batched_eval.py) and returns, episode by
episode, what one-at-a-time play returns: `reference` below is the evaluation loop as it was before (one
env, one episode and one agent at a time, episode k reset with seed + k), and every case compares the per-episode
global returns and each agent's mean return for equality, not closeness (Box actions: to rounding). Cases:
simple_spread with a policy per agent and with one shared policy reading the agent id, simple_adversary (adversary
and good agents observe 8 and 10 numbers), IQL's Q-networks, continuous actions (equal to rounding, see CLOSE),
agents that finish early (early_env.py), action masks in both conventions (masked_env.py), and an env whose episode
length depends on its seed, so envs finish at different steps and take the next episode in a shifting order.
Policies are seeded networks whose head is scaled up, so the greedy action follows the observation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces as gym_spaces
from pettingzoo import ParallelEnv

from nimbus.algos.multiagent import make_multiagent_algo
from nimbus.config import NimbusConfig, load_config
from nimbus.envs.masks import masks_from
from nimbus.envs.parallel import agent_spaces, make_parallel_env
from nimbus.marless import evaluate as marless_evaluate
from nimbus.marless.agent_id import append_agent_id, uses_agent_id, with_agent_id
from nimbus.marless.evaluate import evaluate_agents
from nimbus.models.weights import model_to_message

pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
REPO = Path(__file__).resolve().parents[3]
SEEDED_LENGTH = f"{__name__}:SeededLength"


class SeededLength(ParallelEnv):
    """Two agents; the episode lasts 2-9 steps, drawn from the reset seed; observations drawn from the same RNG;
    reward: the action times the first observation, so returns depend on the greedy actions."""

    metadata = {"name": "seeded_length_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["x", "y"]
        self.agents: list[str] = []
        self.rng, self.left = np.random.default_rng(0), 0

    def observation_space(self, agent: str) -> gym_spaces.Box:
        return gym_spaces.Box(-10.0, 10.0, (4,), np.float32)

    def action_space(self, agent: str) -> gym_spaces.Discrete:
        return gym_spaces.Discrete(3)

    def _obs(self) -> dict[str, np.ndarray]:
        return {agent: self.rng.normal(size=4).astype(np.float32) for agent in self.agents}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        self.rng = np.random.default_rng(seed)
        self.agents, self.left = list(self.possible_agents), int(self.rng.integers(2, 10))
        self.last = self._obs()
        return self.last, {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        live, self.left = list(self.agents), self.left - 1
        rewards = {agent: float(int(actions[agent]) * self.last[agent][0]) for agent in live}
        self.last = self._obs()
        truncated = {agent: self.left == 0 for agent in live}
        if self.left == 0:
            self.agents = []
        return self.last, rewards, dict.fromkeys(live, False), truncated, {agent: {} for agent in live}


def reference(*, config: NimbusConfig, algo: Any, models: dict[str, torch.nn.Module], agent_policy: dict[str, str],
              episodes: int, seed: int) -> list[dict[str, float]]:
    """Greedy evaluation as marless/evaluate.py played it before batching: each episode's per-agent returns."""
    env = make_parallel_env(env_id=config.env.id, seed=seed, kwargs=dict(config.env.kwargs), imports=config.env.imports)
    env.reset(seed=seed)
    order, agent_id, played = sorted(agent_spaces(env=env)), uses_agent_id(marless=config.marless), []
    for episode in range(episodes):
        obs, infos = env.reset(seed=seed + episode)
        returns = {agent: 0.0 for agent in agent_policy}
        while env.agents:
            actions = {}
            for agent in env.agents:
                inputs = np.asarray(obs[agent], dtype=np.float32)[None]
                if agent_id:
                    inputs = append_agent_id(obs=inputs, agent_index=np.array([order.index(agent)]),
                                             num_agents=len(order))
                mask = masks_from(infos=infos).get(agent)
                extra = {} if mask is None else {"action_mask": torch.as_tensor(mask)[None]}
                action = algo.act(model=models[agent_policy[agent]], explore=False, obs=torch.as_tensor(inputs),
                                  **extra).actions[0]
                actions[agent] = action.item() if np.ndim(action) == 0 else action
            obs, rewards, _, _, infos = env.step(actions)
            for agent, reward in rewards.items():
                returns[agent] += float(reward)
        played.append(returns)
    env.close()
    return played


def _policies(*, config: NimbusConfig, algo: Any, agent_policy: dict[str, str]) -> dict[str, torch.nn.Module]:
    """A seeded network per policy, its output layer ×50 so the greedy action changes with the observation."""
    env = make_parallel_env(env_id=config.env.id, seed=0, kwargs=dict(config.env.kwargs), imports=config.env.imports)
    spaces, models = agent_spaces(env=env), {}
    for index, (agent, policy) in enumerate(sorted(agent_policy.items())):
        if policy in models:
            continue
        torch.manual_seed(100 + index)
        model = algo.make_policy(spaces=with_agent_id(spaces=spaces[agent], num_agents=len(spaces))
                                 if uses_agent_id(marless=config.marless) else spaces[agent])
        last = [module for module in model.modules() if isinstance(module, torch.nn.Linear)][-1]
        with torch.no_grad():
            last.weight.mul_(50.0)
        models[policy] = model.eval()
    return models


CASES = {   # case → (shipped config, overrides, agent→policy)
    "spread_own": ("marless-ippo-spread", [], {f"agent_{i}": f"p_agent_{i}" for i in range(3)}),
    "spread_shared_agent_id": ("marless-ippo-spread", ["marless.sharing=full"],
                               {f"agent_{i}": "p_all" for i in range(3)}),
    "spread_iql": ("marless-iql-spread", [], {f"agent_{i}": f"p_agent_{i}" for i in range(3)}),
    "adversary": ("marless-ippo-spread", ["env.id=mpe2:simple_adversary_v3", "env.kwargs={N: 2, max_cycles: 25}"],
                  {"adversary_0": "p_adv", "agent_0": "p_agent_0", "agent_1": "p_agent_1"}),
    "early_done": ("marless-ippo-spread", ["env.id=tests.unit.marless.early_env:make_env", "env.kwargs={}"],
                   {"long": "p_long", "short": "p_short"}),
    "masks_info": ("marless-ippo-spread", ["env.id=tests.unit.marless.masked_env:make_env",
                                           "env.kwargs={convention: info}"], {"a": "p_a", "b": "p_b"}),
    "masks_obs": ("marless-ippo-spread", ["env.id=tests.unit.marless.masked_env:make_env",
                                          "env.kwargs={convention: obs}"], {"a": "p_a", "b": "p_b"}),
    "seeded_length": ("marless-ippo-spread", [f"env.id={SEEDED_LENGTH}", "env.kwargs={}"], {"x": "p", "y": "p"}),
    "spread_continuous": ("marless-ippo-spread", ["env.kwargs={N: 3, max_cycles: 25, continuous_actions: true}"],
                          {f"agent_{i}": f"p_agent_{i}" for i in range(3)}),
}
# A Gaussian's mean computed in a batch differs from the one-row forward in its last bits (torch's CPU matmul sums
# in another order), so Box actions give returns that agree to rounding (4e-7 apart measured), not bitwise.
# Discrete actions are the arg-max of such outputs: the same unless two actions' scores tie to rounding.
CLOSE = {"spread_continuous"}

UNSEEDED = {"early_done", "masks_info", "masks_obs"}   # envs that play the same episode whatever the seed


@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_greedy_evaluation_returns_what_one_at_a_time_play_returns(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """10 episodes (seeds 40 000-40 009) on 3 envs (each env plays several episodes, in an order set by when its
    episodes end) and on 32 (every episode at once)."""
    name, overrides, agent_policy = CASES[case]
    config = load_config(path=REPO / "configs" / f"{name}.yaml", overrides=overrides)
    algo = make_multiagent_algo(config=config.algo)
    models = _policies(config=config, algo=algo, agent_policy=agent_policy)
    expected = reference(config=config, algo=algo, models=models, agent_policy=agent_policy, episodes=10, seed=40_000)
    weights = {policy: model_to_message(model=model, version=3) for policy, model in models.items()}
    for num_envs in (3, 32):
        monkeypatch.setattr(marless_evaluate, "NUM_ENVS", num_envs)
        result = evaluate_agents(config=config, algo=algo, weights=weights, agent_policy=agent_policy, episodes=10,
                                 seed=40_000)
        returns = [float(np.mean(list(returns.values()))) for returns in expected]
        agent_returns = {agent: float(np.mean([returns[agent] for returns in expected]))
                         for agent in sorted(agent_policy)}
        if case in CLOSE:
            returns, agent_returns = pytest.approx(returns, rel=1e-5), pytest.approx(agent_returns, rel=1e-5)
        assert result.returns == returns, num_envs
        assert result.agent_returns == agent_returns, num_envs
        assert set(result.policy_versions.values()) == {3}
    if case not in UNSEEDED:
        assert len(set(result.returns)) > 1, result.returns      # the episodes differ: a wrong seed would show
