"""A user's env (env.imports + FlattenObservation) and a user's network (algo.model) train end to end: PPO on
forked workers (the user's modules must import there), DQN's Q-network on the offpolicy workflow inline
(runtime/inline.py: what is tested is that the network trains, not where)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from nimbus.config import load_config
from nimbus.data.checkpoint import load_checkpoint
from nimbus.run.loop import train

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"



@pytest.fixture
def user_code(user_nets: Path, monkeypatch: pytest.MonkeyPatch):
    """examples/ and tests/conftest.py's module of networks (``usernets``) importable in the driver (sys.path) and
    the workers (PYTHONPATH)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("PYTHONPATH", f"{EXAMPLES}{os.pathsep}{os.environ['PYTHONPATH']}")
    yield
    sys.modules.pop("corridor", None)
    gym.registry.pop("Corridor-v0", None)


def test_custom_env_via_imports_with_a_custom_ppo_model_learns(user_code, tmp_path: Path) -> None:
    config = load_config(path=EXAMPLES / "corridor.yaml", overrides=[
        "env.id=Corridor-v0", "env.imports=[corridor]", "algo.model=usernets:Policy",
        f"output.root_dir={tmp_path}", "output.report=false", "output.loggers=[]",
        "output.status_line=false", "train.eval_episodes=5"])
    result = train(config=config)
    assert result.summary.stopped_by == "target_return", result.summary
    assert result.summary.final_return >= 0.5 and result.summary.eval_return > 0.3
    weights = load_checkpoint(path=result.run_dir).weights
    assert "param.net.pi.weight" in weights.arrays and weights.arrays["param.net.body.0.weight"].shape == (32, 16)


def test_custom_dqn_q_network_trains_on_the_offpolicy_workflow(user_code, tmp_path: Path) -> None:
    config = load_config(path=EXAMPLES / "corridor.yaml", overrides=[
        "algo={name: dqn, model: 'usernets:QNet', learning_starts: 256, train_freq: 64, gradient_steps: 64, gamma: 0.9,"
        " target_update_interval: 64, exploration_fraction: 0.2}",
        "train.workflow=offpolicy", "train.total_env_steps=6000", "train.target_return=null",
        "offpolicy.max_steps_ahead=512", "actors.fragment_steps=64", "env.num_envs_per_actor=1",
        f"output.root_dir={tmp_path}", "output.report=false", "output.loggers=[]",
        "output.status_line=false", "train.eval_episodes=10", "runtime.backend=inline",
        # stop once it has learned rather than train the 6 000-step budget out (random play returns -1.9; measured:
        # evaluations every 500 env steps of -1, 0, then ≥ 0.5 from 1 500 on; the shortest walks average 0.7)
        "train.eval_every_env_steps=500", "train.target_eval_return=0.5"])
    result = train(config=config)
    assert result.summary.stopped_by == "target_eval_return", result.summary
    assert result.summary.eval_return is not None and result.summary.eval_return > 0.3, result.summary
    weights = load_checkpoint(path=result.run_dir).weights
    assert {"param.q.net.0.weight", "param.q_target.net.2.bias"} <= set(weights.arrays)
