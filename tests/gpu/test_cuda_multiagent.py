"""The multi-agent value learners' update on a real GPU: every test is ``gpu``-marked and skipped without CUDA (run
them with ``scripts/gpu_check.sh`` or ``pytest -m gpu tests/gpu``).

What the CPU tests cannot prove: that VDN's and QMIX's joint update on CUDA (indices copied once, fused Adams, the
non-finite guard handed to the fused kernels as ``found_inf``) equals the CPU's, and that a non-finite step there
leaves the weights and Adam's state as they were. Tolerance as tests/gpu/test_cuda_learners.py.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from nimbus.algos.multiagent.config import QMIXConfig, VDNConfig
from nimbus.algos.multiagent.qmix import QMIX
from nimbus.algos.multiagent.vdn import VDN
from nimbus.marless.team_learner import TeamObjective, TrainedNet, train_team
from tests.unit.marless.test_marless_value_learner import OBS_DIM, SPACES, STATE_DIM

pytestmark = pytest.mark.gpu
ATOL, RTOL = 1e-4, 1e-3
AGENTS = ("agent_0", "agent_1")
ROWS = 512


def _replay(*, device: torch.device, reward: float | None) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    arrays: dict[str, np.ndarray] = {"rewards": rng.normal(size=ROWS).astype(np.float32) if reward is None
                                     else np.full(ROWS, reward, np.float32),
                                     "terminated": rng.random(ROWS) < 0.1,
                                     "state": rng.normal(size=(ROWS, STATE_DIM)).astype(np.float32),
                                     "next_state": rng.normal(size=(ROWS, STATE_DIM)).astype(np.float32)}
    for agent in AGENTS:
        arrays |= {f"{agent}/obs": rng.normal(size=(ROWS, OBS_DIM)).astype(np.float32),
                   f"{agent}/next_obs": rng.normal(size=(ROWS, OBS_DIM)).astype(np.float32),
                   f"{agent}/actions": rng.integers(0, 3, ROWS), f"{agent}/terminated": arrays["terminated"],
                   f"{agent}/alive": np.ones(ROWS, bool)}
    return {name: torch.as_tensor(value, device=device) for name, value in arrays.items()}


def _net(*, module: torch.nn.Module, device: torch.device, make_optimizer) -> TrainedNet:
    online = copy.deepcopy(module).to(device)
    return TrainedNet(online=online, target=copy.deepcopy(online).requires_grad_(False),
                      optimizer=make_optimizer(online), grad_steps=0)


def _update(*, algo, device: torch.device, reward: float | None) -> tuple[TeamObjective, dict]:
    torch.manual_seed(0)
    policies = {f"p_{agent}": algo.make_policy(spaces=SPACES) for agent in AGENTS}
    nets = {p: _net(module=m, device=device, make_optimizer=lambda m: algo.make_optimizer(model=m))
            for p, m in policies.items()}
    mixer = _net(module=algo.make_mixer(state_dim=STATE_DIM, num_agents=len(AGENTS)), device=device,
                 make_optimizer=lambda m: algo.make_mixer_optimizer(mixer=m)) if algo.name == "qmix" else None
    objective = TeamObjective(config=algo.config, agent_policy={a: f"p_{a}" for a in AGENTS}, agents=AGENTS,
                              nets=nets, mixer=mixer)
    stats = train_team(objective=objective, replay=_replay(device=device, reward=reward), config=algo.config,
                       generator=torch.Generator().manual_seed(1))
    return objective, stats


def _algo(name: str):
    common = dict(hidden_sizes=(32,), batch_size=64, gradient_steps=10, learning_starts=0, target_update_period=4)
    return VDN(config=VDNConfig(**common)) if name == "vdn" else \
        QMIX(config=QMIXConfig(**common, mixing_embed_dim=8, hypernet_embed=16))


@pytest.mark.parametrize("name", ["vdn", "qmix"])
def test_the_cuda_team_update_equals_the_cpu_update(name: str) -> None:
    cpu, cpu_stats = _update(algo=_algo(name), device=torch.device("cpu"), reward=None)
    cuda, cuda_stats = _update(algo=_algo(name), device=torch.device("cuda:0"), reward=None)
    assert cuda_stats["gradient_steps_run"] == cpu_stats["gradient_steps_run"] == 10
    for a, b in zip(cpu.parameters(), cuda.parameters(), strict=True):
        assert b.device.type == "cuda"
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=ATOL, rtol=RTOL)
    assert cuda_stats["policy_loss"] == pytest.approx(cpu_stats["policy_loss"], rel=RTOL, abs=ATOL)


@pytest.mark.parametrize("name", ["vdn", "qmix"])
def test_a_nonfinite_cuda_step_changes_neither_the_weights_nor_adam(name: str) -> None:
    """NaN rewards make every step's loss NaN: the fused Adams skip each step (found_inf) on the device, so the
    networks are the seed's initial ones bit for bit and Adam holds no moment and no step."""
    algo = _algo(name)
    after, stats = _update(algo=algo, device=torch.device("cuda:0"), reward=float("nan"))
    assert stats["nonfinite_steps"] == 10 and stats["gradient_steps_run"] == 0
    torch.manual_seed(0)   # as _update does: the same initial policies
    fresh = {f"p_{agent}": algo.make_policy(spaces=SPACES) for agent in AGENTS}
    for policy, module in fresh.items():
        for a, b in zip(module.parameters(), after.nets[policy].online.parameters(), strict=True):
            assert torch.equal(a, b.detach().cpu())
        state = after.nets[policy].optimizer.state
        assert all(not torch.any(s["exp_avg"]) and float(s["step"]) == 0.0 for s in state.values())
