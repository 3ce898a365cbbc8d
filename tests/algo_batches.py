"""One learner update per algorithm on a synthetic batch, for device tests (tests/unit/algos/test_device_audit.py
on CPU, tests/gpu/test_cuda_learners.py on CUDA): the same seed gives the same model, batch and update.

Example::

    case = make_case(name="ppo", device=torch.device("cpu"), seed=0)
    stats = run_update(case=case, seed=0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
from nimbus.envs.spaces import EnvSpaces

# name -> (algo config, observation dim, action space): small, fast, every code path of the update
CASES: dict[str, tuple[dict[str, Any], gym.Space]] = {
    "ppo": ({"name": "ppo", "num_epochs": 2, "minibatch_size": 32}, gym.spaces.Discrete(3)),
    "ppo_continuous": ({"name": "ppo", "num_epochs": 2, "minibatch_size": 32}, gym.spaces.Box(-1, 1, (2,))),
    "dqn": ({"name": "dqn", "batch_size": 32, "buffer_capacity": 1000, "target_update_interval": 1},
            gym.spaces.Discrete(3)),
    "sac": ({"name": "sac", "batch_size": 32, "buffer_capacity": 1000, "learning_starts": 0},
            gym.spaces.Box(-1, 1, (2,))),
    "impala": ({"name": "impala", "rollout_length": 8}, gym.spaces.Discrete(3)),
    "impact": ({"name": "impala", "rollout_length": 8, "variant": "impact", "target_update_interval": 2},
               gym.spaces.Discrete(3)),
}
ROWS = 64
OBS_DIM = 4


@dataclass
class Case:
    algo: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batch: dict[str, torch.Tensor]


def host_batch(*, algo: Any, spaces: EnvSpaces, seed: int) -> dict[str, np.ndarray]:
    """ROWS random rows of ``algo.buffer_spec``: valid actions, a few episode ends."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for key, spec in algo.buffer_spec(spaces=spaces).items():
        shape = (ROWS, *spec.shape)
        if key == "actions" and isinstance(spaces.action, gym.spaces.Discrete):
            out[key] = rng.integers(0, int(spaces.action.n), size=shape).astype(spec.dtype)
        elif spec.dtype == "bool":
            out[key] = rng.random(shape) < 0.1
        elif key == "actions":
            out[key] = rng.uniform(-0.9, 0.9, size=shape).astype(spec.dtype)
        elif "log_prob" in key:
            out[key] = np.log(rng.uniform(0.2, 0.9, size=shape)).astype(spec.dtype)
        else:
            out[key] = rng.standard_normal(shape).astype(spec.dtype)
    if "cut" in out:
        out["cut"] |= out["terminated"] | out["truncated"]
    return out


def make_case(*, name: str, device: torch.device, seed: int,
              to_device: Callable[[np.ndarray], torch.Tensor] | None = None,
              overrides: dict[str, Any] | None = None) -> Case:
    """The model (seeded init, moved to ``device``), its optimizer and the batch on ``device``.
    ``to_device``: how a column reaches the device (default ``torch.as_tensor(column, device=device)``);
    ``overrides``: algo config fields to change (e.g. ``{"minibatch_size": 8}``)."""
    config_dict, action_space = CASES[name]
    config = ALGO_CONFIGS[config_dict["name"]].model_validate({**config_dict, **(overrides or {})})
    algo = make_algorithm(config=config)
    spaces = EnvSpaces(observation=gym.spaces.Box(-5, 5, (OBS_DIM,), dtype=np.float32), action=action_space)
    torch.manual_seed(seed)
    model = algo.make_model(spaces=spaces).to(device)
    optimizer = algo.make_optimizer(model=model)
    convert = to_device or (lambda column: torch.as_tensor(column, device=device))
    batch = {key: convert(value) for key, value in host_batch(algo=algo, spaces=spaces, seed=seed).items()}
    return Case(algo=algo, model=model, optimizer=optimizer, batch=batch)


def run_update(*, case: Case, seed: int) -> Any:
    """Post-process and update, as the learner function does (its generator seeded by ``seed``)."""
    batch = case.algo.postprocess(batch=case.batch)
    generator = torch.Generator().manual_seed(seed)
    return case.algo.update(model=case.model, optimizer=case.optimizer, batch=batch, progress=0.25,
                            generator=generator)
