"""``nimbus export RUN_DIR --format torchscript|onnx``: the trained policy as one self-contained file.

The exported module maps a batch of raw observations (the env's dtype, shape ``(B, *obs_shape)``) to
the actions ``nimbus eval --deterministic`` takes: observation normalisation (``algo.normalize_obs``) is
baked in with the checkpoint's statistics, then the greedy action (arg-max for discrete actions, the
mean, or SAC's tanh(mean) rescaled, for continuous ones), clipped to the action space. It needs only
torch to run::

    policy = torch.jit.load("runs/x/export/policy.pt")
    actions = policy(torch.as_tensor(obs[None]))          # (1,) int64 or (1, act_dim) float32

``policy.pt`` also carries ``nimbus.json`` (env id, spaces, algorithm, policy_version) as an extra file.
``--format onnx`` (the ``onnx`` extra) writes ``policy.onnx`` with input ``obs`` and output ``action``
(batch dimension dynamic) and the same JSON in the model's metadata under ``nimbus``; onnxruntime runs it::

    session = onnxruntime.InferenceSession("runs/x/export/policy.onnx")
    actions = session.run(["action"], {"obs": obs[None]})[0]

Example::

    path = export_run(run_dir=Path("runs/x"), output=None)
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from nimbus.config import parse_config
from nimbus.data.checkpoint import load_checkpoint
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import CheckpointError, ConfigError
from nimbus.models import distributions
from nimbus.models.weights import load_model
from nimbus.policy.build import probe_spaces
from nimbus.roles.evaluate import LoadedPolicy, load_policy

FORMATS = ("torchscript", "onnx")
_SUFFIX = {"torchscript": ".pt", "onnx": ".onnx"}
_EPSILON = 1e-8   # envs/normalize.py's ε
_CLIP = 10.0      # envs/normalize.py's default clip


class DeployedPolicy(nn.Module):
    """observation → (normalise) → greedy action → clip, for one algorithm's model."""

    model: Any   # the algorithm's model class (its q, actor or distribution heads)
    obs_mean: torch.Tensor   # registered buffers
    obs_var: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, *, policy: LoadedPolicy) -> None:
        super().__init__()
        self.model, self.algo_name = policy.model, policy.algo.name
        self.normalize = policy.rms is not None
        rms = policy.rms
        self.register_buffer("obs_mean", torch.as_tensor(rms.mean if rms else np.zeros(1), dtype=torch.float64))
        self.register_buffer("obs_var", torch.as_tensor(rms.var if rms else np.ones(1), dtype=torch.float64))
        action = policy.spaces.action
        self.box = isinstance(action, gym.spaces.Box)
        low, high = (action.low, action.high) if isinstance(action, gym.spaces.Box) else (np.zeros(1), np.zeros(1))
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs
        if self.normalize:  # as RunningMeanStd.normalize: float64, clipped, then float32
            x = ((x.double() - self.obs_mean) / torch.sqrt(self.obs_var + _EPSILON)).clamp(-_CLIP, _CLIP)
        action = self._greedy(x.float())
        return torch.minimum(torch.maximum(action, self.low), self.high) if self.box else action

    def _greedy(self, obs: torch.Tensor) -> torch.Tensor:
        if self.algo_name in ("dqn", "iql", "vdn", "qmix"):
            return self.model.q(obs).argmax(dim=-1)
        if self.algo_name == "sac":
            return self.model.to_env_actions(self.model.actor.sample(obs, deterministic=True)[0])
        net = self.model.net if self.algo_name == "impala" else self.model
        return distributions.mode(dist=net.distribution(obs))


def export_run(*, run_dir: Path, output: Path | None = None, fmt: str = "torchscript") -> Path:
    """Write the newest verified checkpoint's policy to ``output`` (default ``RUN_DIR/export/policy.pt|.onnx``)."""
    from nimbus.marless.checkpoint import is_multiagent

    _check_format(fmt=fmt)
    state = load_checkpoint(path=run_dir)
    if is_multiagent(config=state.config):
        raise CheckpointError(f"{run_dir} holds one policy of a multi-agent run: export the run directory, "
                              "which writes every policy in use")
    config = parse_config(data=state.config)
    spaces = probe_spaces(config=config)
    deployed = DeployedPolicy(policy=load_policy(config=config, weights=state.weights, spaces=spaces)).eval()
    output = Path(output) if output is not None else Path(run_dir) / "export" / f"policy{_SUFFIX[fmt]}"
    _write(deployed=deployed, spaces=spaces, output=output, fmt=fmt,
           meta={"env_id": config.env.id, "algo": config.algo.name, "policy_version": state.policy_version})
    return output


def export_marless_run(*, run_dir: Path, output_dir: Path | None = None, fmt: str = "torchscript") -> list[Path]:
    """A multi-agent run: each policy in use at the newest round every policy has a checkpoint of, one file
    each (``<output_dir>/<policy>.pt|.onnx``, default ``RUN_DIR/export``); the metadata names its agents."""
    from nimbus.algos.multiagent import make_multiagent_algo
    from nimbus.marless.agent_id import uses_agent_id, with_agent_id
    from nimbus.marless.checkpoint import load_run
    from nimbus.marless.parts import probe_agents

    _check_format(fmt=fmt)
    run = load_run(path=run_dir)
    config, states, agent_policy = run.config, run.states, run.agent_policy
    algo = make_multiagent_algo(config=config.algo)
    agents_all, raw, _ = probe_agents(config=config)
    spaces = {agent: with_agent_id(spaces=raw[agent], num_agents=len(agents_all))   # policies read obs ⊕ one-hot
              if uses_agent_id(marless=config.marless) else raw[agent] for agent in agents_all}
    output_dir = Path(output_dir) if output_dir is not None else Path(run_dir) / "export"
    written = []
    for policy in sorted(set(agent_policy.values())):
        agents = sorted(agent for agent, p in agent_policy.items() if p == policy)
        model = algo.make_policy(spaces=spaces[agents[0]])
        load_model(model=model, message=states[policy].weights)
        deployed = DeployedPolicy(policy=LoadedPolicy(algo=algo, model=model.eval(), rms=None,
                                                      spaces=spaces[agents[0]])).eval()
        output = output_dir / f"{policy}{_SUFFIX[fmt]}"
        _write(deployed=deployed, spaces=spaces[agents[0]], output=output, fmt=fmt,
               meta={"env_id": config.env.id, "algo": config.algo.name, "policy": policy, "agents": agents,
                     "policy_version": states[policy].policy_version})
        written.append(output)
    return written


def _check_format(*, fmt: str) -> None:
    if fmt not in FORMATS:
        raise ConfigError(f"export format {fmt!r} is not supported; choose from {', '.join(FORMATS)}")


def _write(*, deployed: DeployedPolicy, spaces: EnvSpaces, output: Path, fmt: str, meta: dict) -> None:
    example = torch.as_tensor(np.stack([spaces.observation.sample() for _ in range(2)]))
    output.parent.mkdir(parents=True, exist_ok=True)
    meta_json = json.dumps({**meta, "observation_shape": list(spaces.observation.shape or ()),
                            "action_space": str(spaces.action), "normalized_obs": deployed.normalize})
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # torch.jit's and the TorchScript-based ONNX exporter's deprecation notices
        if fmt == "onnx":
            _write_onnx(deployed=deployed, example=example, output=output, meta=meta_json)
        else:
            traced = torch.jit.trace(deployed, example, check_trace=False)
            torch.jit.save(traced, str(output), _extra_files={"nimbus.json": meta_json})


def _write_onnx(*, deployed: DeployedPolicy, example: torch.Tensor, output: Path, meta: str) -> None:
    try:
        import onnx
    except ImportError as err:
        raise ConfigError("--format onnx needs the onnx extra: pip install nimbus-rl[onnx]") from err
    # the TorchScript-based exporter: torch's default (dynamo) exporter would also need onnxscript
    torch.onnx.export(deployed, (example,), str(output), dynamo=False, input_names=["obs"], output_names=["action"],
                      dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}})
    model = onnx.load(str(output))
    onnx.helper.set_model_props(model, {"nimbus": meta})
    onnx.save(model, str(output))
