"""A user's env (env.imports + FlattenObservation) and a user's network (algo.model) train end to end."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

from nimbus.config import load_config
from nimbus.data.checkpoint import load_checkpoint
from nimbus.run.loop import train

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

NETS = '''
from torch import nn


class Policy(nn.Module):
    def __init__(self, *, observation_space, action_space, width=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(observation_space.shape[0], width), nn.Tanh())
        self.pi, self.v = nn.Linear(width, action_space.n), nn.Linear(width, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h)


class QNet(nn.Module):
    def __init__(self, *, observation_space, action_space):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(observation_space.shape[0], 64), nn.ReLU(), nn.Linear(64, action_space.n))

    def forward(self, obs):
        return self.net(obs)
'''


@pytest.fixture
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """examples/ and a module of networks importable in the driver (sys.path) and the workers (PYTHONPATH)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "usernets_it.py").write_text(textwrap.dedent(NETS))
    for path in (code, EXAMPLES):
        monkeypatch.syspath_prepend(str(path))
    monkeypatch.setenv("PYTHONPATH", f"{code}:{EXAMPLES}")
    yield
    for name in ("usernets_it", "corridor"):
        sys.modules.pop(name, None)
    gym.registry.pop("Corridor-v0", None)


def test_custom_env_via_imports_with_a_custom_ppo_model_learns(user_code, tmp_path: Path) -> None:
    config = load_config(path=EXAMPLES / "corridor.yaml", overrides=[
        "env.id=Corridor-v0", "env.imports=[corridor]", "algo.model=usernets_it:Policy",
        f"output.root_dir={tmp_path}", "output.report=false", "output.loggers=[]",
        "output.status_line=false", "train.eval_episodes=5"])
    result = train(config=config)
    assert result.summary.stopped_by == "target_return", result.summary
    assert result.summary.final_return >= 0.5 and result.summary.eval_return > 0.3
    weights = load_checkpoint(path=result.run_dir).weights
    assert "param.net.pi.weight" in weights.arrays and weights.arrays["param.net.body.0.weight"].shape == (32, 16)


def test_custom_dqn_q_network_trains_on_the_async_workflow(user_code, tmp_path: Path) -> None:
    config = load_config(path=EXAMPLES / "corridor.yaml", overrides=[
        "algo={name: dqn, model: 'usernets_it:QNet', learning_starts: 256, train_freq: 64, gradient_steps: 64, gamma: 0.9,"
        " target_update_interval: 64, exploration_fraction: 0.2}",
        "train.workflow=async", "train.total_env_steps=6000", "train.target_return=null",
        "async_workflow.max_steps_ahead=512", "actors.fragment_steps=64", "env.num_envs_per_actor=1",
        f"output.root_dir={tmp_path}", "output.report=false", "output.loggers=[]",
        "output.status_line=false", "train.eval_episodes=10"])
    result = train(config=config)
    assert result.summary.eval_return is not None and result.summary.eval_return > 0.3, result.summary
    weights = load_checkpoint(path=result.run_dir).weights
    assert {"param.q.net.0.weight", "param.q_target.net.2.bias"} <= set(weights.arrays)
