"""``nimbus eval --video`` of a multi-agent run on an env that cannot render: one warning, no video, and the
evaluation itself goes on with the same returns (marless/evaluate.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

from nimbus.algos.multiagent import multiagent_algo_from_dict
from nimbus.algos.multiagent.config import IPPOConfig
from nimbus.algos.multiagent.messages import initial_messages
from nimbus.config import parse_config
from nimbus.envs.parallel import agent_spaces, make_parallel_env
from nimbus.marless.evaluate import evaluate_agents


class Corridor(ParallelEnv):
    """Two agents, five steps, reward 1 for action 1; it takes no render_mode and renders nothing."""

    metadata = {"name": "corridor"}
    possible_agents = ["a", "b"]

    def __init__(self) -> None:
        self.agents, self.t = [], 0

    def observation_space(self, agent):
        return spaces.Box(-1, 1, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def render(self):
        return None                  # as an env built without a render_mode does

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        done = self.t >= 5
        obs = {a: np.full(2, self.t / 5, np.float32) for a in self.agents}
        result = (obs, {a: float(actions[a]) for a in self.agents}, {a: False for a in self.agents},
                  {a: done for a in self.agents}, {a: {} for a in self.agents})
        if done:
            self.agents = []
        return result


def _config():
    return parse_config(data={"env": {"id": f"{__name__}:Corridor"}, "algo": {"name": "ippo"},
                              "train": {"workflow": "marless"}})


def test_an_env_that_cannot_render_is_evaluated_without_video(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    config = _config()
    env = make_parallel_env(env_id=config.env.id, seed=0, kwargs={})
    env.reset()
    algo = multiagent_algo_from_dict(algo=IPPOConfig().model_dump(mode="json"))
    weights = {"p": initial_messages(algo=algo, spaces=agent_spaces(env=env)["a"], state_dim=4, num_agents=2,
                                     seed=0)["weights"]}
    common = dict(config=config, algo=algo, weights=weights, agent_policy={"a": "p", "b": "p"}, episodes=3, seed=7)
    plain = evaluate_agents(**common)
    with caplog.at_level(logging.WARNING):
        filmed = evaluate_agents(**common, video_dir=tmp_path / "videos")
    assert filmed.video_dir is None and not (tmp_path / "videos").exists()
    assert "no video" in caplog.text and filmed.returns == plain.returns
