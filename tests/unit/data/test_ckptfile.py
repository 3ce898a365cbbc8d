"""Checkpoint files are plain safetensors files the safetensors library reads without nimbus (format 2);
format 1's framed files still load."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.multiagent.messages import critic_to_message
from nimbus.data.checkpoint import Checkpointer, CheckpointState, load_checkpoint
from nimbus.data.codec import Message, encode
from nimbus.models.mlp import ActorCritic
from nimbus.models.weights import load_model, model_to_message, optimizer_to_message

READER = textwrap.dedent('''
    import json, sys
    from safetensors import safe_open
    from safetensors.numpy import load_file
    path = sys.argv[1]
    tensors = load_file(path)
    with safe_open(path, framework="np") as handle:
        metadata = handle.metadata()
    assert not any(name == "nimbus" or name.startswith("nimbus.") for name in sys.modules), "nimbus imported"
    print(json.dumps({"tensors": {k: v.tolist() for k, v in tensors.items()}, "metadata": metadata}))
''')


def _model_state(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    torch.manual_seed(0)
    model = ActorCritic(observation_space=gym.spaces.Box(-1, 1, (3,)), action_space=gym.spaces.Discrete(2),
                        hidden_sizes=(4,))
    extras = {"obs_rms.mean": np.arange(3, dtype=np.float64), "obs_rms.count": np.array(7.0)}
    optimizer = torch.optim.Adam(model.parameters())
    model.critic[0].weight.sum().backward()
    optimizer.step()
    state = CheckpointState(weights=model_to_message(model=model, version=5, extra=extras),
                            optimizer=optimizer_to_message(optimizer=optimizer, version=5), policy_version=5,
                            round=5, env_steps=50, episodes=2, config={"name": "t"},
                            parts={"critic": critic_to_message(critic=model.critic, optimizer=optimizer, version=5)})
    return model, Checkpointer(directory=tmp_path).save(state=state)


def test_weights_file_opens_with_safetensors_alone_named_by_state_dict_keys(tmp_path: Path) -> None:
    model, path = _model_state(tmp_path)
    for name in ("weights", "optimizer", "critic"):   # critic: a MARL checkpoint's extra network (parts)
        out = subprocess.run([sys.executable, "-c", READER, str(path / f"{name}.safetensors")], capture_output=True,
                             text=True, timeout=60, check=True)
        loaded = json.loads(out.stdout)
        assert "nimbus" in loaded["metadata"]
        if name == "weights":
            state_dict = model.state_dict()
            extra = {"nimbus_extra/obs_rms.mean", "nimbus_extra/obs_rms.count"}
            assert set(loaded["tensors"]) == set(state_dict) | extra
            for key, tensor in state_dict.items():
                np.testing.assert_array_equal(np.array(loaded["tensors"][key], dtype=np.float32), tensor.numpy())
            header = json.loads(loaded["metadata"]["nimbus"])
            assert header["policy_version"] == 5 and header["extras"] == ["obs_rms.count", "obs_rms.mean"]
        elif name == "optimizer":
            assert any(key.endswith(".exp_avg") for key in loaded["tensors"])
        else:
            for key, tensor in model.critic.state_dict().items():
                np.testing.assert_array_equal(np.array(loaded["tensors"][f"param.{key}"], dtype=np.float32),
                                              tensor.numpy())


def test_weights_round_trip_through_the_file(tmp_path: Path) -> None:
    model, path = _model_state(tmp_path)
    state = load_checkpoint(path=path)
    other = ActorCritic(observation_space=gym.spaces.Box(-1, 1, (3,)), action_space=gym.spaces.Discrete(2),
                        hidden_sizes=(4,))
    extras = load_model(model=other, message=state.weights)
    for key, tensor in model.state_dict().items():
        assert torch.equal(other.state_dict()[key], tensor)
    np.testing.assert_array_equal(extras["obs_rms.mean"], np.arange(3.0))
    assert state.weights.header["policy_version"] == 5 and "extras" not in state.weights.header
    assert state.optimizer is not None and state.optimizer.header["param_groups"][0]["lr"] == 1e-3


def test_format_1_framed_checkpoints_still_load(tmp_path: Path) -> None:
    """An old checkpoint: codec frames as files, manifest format_version 1."""
    old = tmp_path / "ckpt-000003"
    old.mkdir()
    weights = encode(Message(header={"policy_version": 3}, arrays={"param.w": np.ones((2, 2), np.float32),
                                                                   "extra.obs_rms.mean": np.zeros(2)}),
                     compress_min_bytes=None)
    (old / "weights.safetensors").write_bytes(weights)
    manifest = {"format_version": 1, "files": {"weights.safetensors": hashlib.sha256(weights).hexdigest()},
                "policy_version": 3, "round": 3, "env_steps": 30, "episodes": 1, "config": {"name": "t"}}
    (old / "manifest.json").write_text(json.dumps(manifest))
    state = load_checkpoint(path=tmp_path)
    assert state.round == 3 and set(state.weights.arrays) == {"param.w", "extra.obs_rms.mean"}
    np.testing.assert_array_equal(state.weights.arrays["param.w"], np.ones((2, 2), np.float32))
