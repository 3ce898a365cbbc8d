"""Learners on a real GPU (issue 25.4); every test is ``gpu``-marked and skipped, with its reason, without CUDA.

What CPU tests cannot prove and these do: the kernels' numerics on CUDA against the CPU's, the CUDA caching
allocator's memory returning to its baseline when a lease ends, forked and spawned workers using CUDA in a
default run, and a learner killed mid-update on the GPU being retried. Run them with
``scripts/gpu_check.sh`` (or ``pytest -m gpu tests/gpu``).

Tolerance of "the CUDA update equals the CPU update": float32 parameters after the update agree within
``atol 1e-4 + rtol 1e-3`` (different kernels and reduction orders; TF32 off, torch's default for matmul).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nimbus.cost.ledger import Ledger
from nimbus.data.stores import STORE_HEADER
from nimbus.models.weights import model_to_message, weights_key
from nimbus.onpolicy.learner import learner_function
from nimbus.onpolicy.loader import DeviceLoader
from nimbus.roles.learner import LearnerRequest
from nimbus.run.loop import train
from nimbus.run.workloads import train_workloads
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.devices import lease_ended, lease_started
from nimbus.runtime.faults import FAULTS_ENV
from support import pool_ledger
from tests.algo_batches import CASES, make_case, run_update

pytestmark = pytest.mark.gpu
ATOL, RTOL = 1e-4, 1e-3
REPO = Path(__file__).resolve().parents[2]
CUDA = torch.device("cuda:0")


def _cpu_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """SAC's reparameterised noise from the CPU generator on both devices (CUDA's generator draws other numbers)."""
    real = torch.randn_like
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: real(t, device="cpu", **kw).to(t.device))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_cuda_update_equals_the_cpu_update(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _cpu_noise(monkeypatch)
    cases = {device: make_case(name=name, device=torch.device(device), seed=0) for device in ("cpu", "cuda")}
    stats = {device: run_update(case=case, seed=0) for device, case in cases.items()}
    cpu_params = dict(cases["cpu"].model.named_parameters())
    for key, param in cases["cuda"].model.named_parameters():
        assert param.device.type == "cuda"
        torch.testing.assert_close(param.detach().cpu(), cpu_params[key].detach(), atol=ATOL, rtol=RTOL,
                                   msg=lambda m, key=key: f"{name} {key}: {m}")
    for field, value in vars(stats["cpu"]).items():
        if isinstance(value, float) and np.isfinite(value):
            assert getattr(stats["cuda"], field) == pytest.approx(value, rel=1e-2, abs=1e-3), field


def test_the_device_loader_stages_pinned_minibatches_on_the_gpu_in_order() -> None:
    """Host columns are pinned and copied without blocking; a column already on the GPU is only gathered."""
    batch = {"obs": torch.arange(40.0).reshape(20, 2), "actions": torch.arange(20),
             "on_gpu": torch.arange(20.0, device=CUDA)}
    order = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    loader = DeviceLoader(batch=batch, index_batches=[order[i:i + 6] for i in range(0, 20, 6)], device=CUDA)
    seen = list(loader)
    assert len(seen) == 4
    for minibatch, rows in zip(seen, [order[i:i + 6] for i in range(0, 20, 6)]):
        assert minibatch["obs"].device.type == "cuda"
        assert torch.equal(minibatch["obs"].cpu(), batch["obs"][rows])
        assert torch.equal(minibatch["actions"].cpu(), batch["actions"][rows])
        assert torch.equal(minibatch["on_gpu"].cpu(), batch["on_gpu"].cpu()[rows])


def _warm_cublas() -> None:
    """cuBLAS's per-process workspace is allocated through torch's caching allocator at a process's first matmul on
    the device and kept for the process's life (65 MiB on an H200, torch 2.11): part of the baseline, not a lease's."""
    layer = torch.nn.Linear(8, 8, device=CUDA)
    layer(torch.ones(4, 8, device=CUDA)).sum().backward()
    del layer


def test_a_lease_leaves_the_gpu_as_it_found_it(store) -> None:
    """The learner computes on the leased GPU; at the lease's end its warm model and optimizer state are on the
    CPU and the allocator holds what it held before; the next lease moves them back and updates warm."""
    from nimbus.algos.ppo.algorithm import PPO
    from nimbus.algos.ppo.config import PPOConfig
    from tests.unit.onpolicy.test_learner_devices import _filled, spaces_of

    spaces = spaces_of("CartPole-v1")
    algo = PPO(config=PPOConfig(num_epochs=2, minibatch_size=32))
    store.put(key=weights_key(policy="main", version=0),
              message=model_to_message(model=algo.make_model(spaces=spaces), version=0))
    _warm_cublas()
    torch.cuda.synchronize()
    gc.collect()
    torch.cuda.empty_cache()
    baseline = (torch.cuda.memory_allocated(CUDA), torch.cuda.memory_reserved(CUDA))
    cache: dict = {}
    with _filled(algo=algo, spaces=spaces) as buffer:
        for version in (0, 1):
            request = LearnerRequest(env_id="CartPole-v1", env_kwargs={}, algo=algo.config.model_dump(mode="json"),
                                     policy="main", policy_version=version, has_optimizer_state=version > 0,
                                     buffer=buffer.descriptor(), progress=0.0, seed=0, device="cpu",
                                     torch_threads=1).to_message(indices=np.arange(64))
            request.header[STORE_HEADER] = {"backend": "shm", "namespace": store.namespace}
            context = FunctionContext(worker_id="w0", function="learner", invocation_id=f"i{version}", attempt=1,
                                      cache=cache, device="cuda:0")
            lease_started(device="cuda:0")
            header = learner_function(context=context, request=request).header
            assert header["device"] == "cuda:0"     # the lease, not learner.device (cpu)
            gc.collect()
            peak = lease_ended(device="cuda:0", cache=cache)
            assert peak is not None and peak > 0
            assert {p.device.type for p in cache["model"].parameters()} == {"cpu"}
            for state in cache["optimizer"].state.values():
                assert all(t.device.type == "cpu" for t in state.values() if torch.is_tensor(t))
            assert (torch.cuda.memory_allocated(CUDA), torch.cuda.memory_reserved(CUDA)) == baseline


def _cli(*args: str, env: dict[str, str] | None = None, timeout_s: float = 420) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nimbus.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s, env=env)


def test_a_default_ppo_cartpole_run_completes_on_the_gpu(tmp_path: Path) -> None:
    """``nimbus train configs/ppo-cartpole.yaml`` as a new user runs it (learner.device auto picks cuda)."""
    run = _cli("train", "configs/ppo-cartpole.yaml", "--run-dir", str(tmp_path / "run"))
    assert run.returncode == 0, run.stderr[-4000:]
    rows = Ledger.load(path=tmp_path / "run" / "ledger.jsonl")
    assert [r for r in rows if r.kind == "learner" and r.outcome == "ok"]


def test_two_workloads_share_one_gpu_by_leases(make_two_workloads, tmp_path: Path) -> None:
    train_workloads(configs=make_two_workloads(["train.total_env_steps=2048", "train.target_return=1000",
                                                "devices.pool=on_demand", "devices.kind=cuda",
                                                "learner.device=cpu"]))   # the lease decides: cuda
    pool = pool_ledger(tmp_path)
    learners = [r for r in pool if r.kind == "learner" and r.outcome == "ok"]
    assert {r.workload for r in learners} == {"cartA", "cartB"}
    assert all(r.device.startswith("cuda:") and (r.device_peak_bytes or 0) > 0 for r in learners)
    leases = sorted((r.lease_start_at, r.lease_end_at) for r in learners if r.device == "cuda:0")
    slots = torch.cuda.device_count()
    if slots == 1:   # one GPU, one learner at a time (learners_per_device 1)
        assert all(end <= next_start for (_, end), (next_start, _) in zip(leases, leases[1:]))


def test_a_learner_killed_mid_update_on_the_gpu_is_retried(make_config, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    counter = tmp_path / "steps"
    monkeypatch.setenv(FAULTS_ENV, json.dumps({"learner.optimizer_step": {
        "action": "kill", "counter_path": str(counter), "after": 3, "times": 1}}))
    config = make_config(overrides=["train.max_rounds=3", "train.target_return=1000", "learner.device=cuda"])
    result = train(config=config)
    rows = Ledger.load(path=result.run_dir / "ledger.jsonl")
    learners = [r for r in rows if r.kind == "learner"]
    assert result.summary.rounds == 3
    failed = next((r for r in learners if r.outcome == "worker_died"), None)   # not the pre-warm rows
    assert failed is not None, "the fault did not fire"
    assert any(r.invocation_id == failed.invocation_id and r.outcome == "ok" for r in learners)  # retried


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cuda_update_reads_the_host_as_often_as_a_cpu_one_and_adam_is_fused(name: str) -> None:
    """On CUDA the optimizer is fused (no host-side step counts) and the update reads the host no more often than
    tests/unit/algos/test_host_reads.py allows on the CPU, at two minibatch counts."""
    from tests.host_reads import count_host_reads
    from tests.unit.algos.test_host_reads import MINIBATCHES

    field, sizes, allowed = MINIBATCHES[name]
    totals = []
    for size in sizes:
        case = make_case(name=name, device=CUDA, seed=0, overrides={field: size})
        assert case.optimizer.defaults.get("fused"), case.optimizer.defaults
        run_update(case=case, seed=0)
        with count_host_reads(optimizers=[case.optimizer]) as reads:
            run_update(case=case, seed=1)
        assert reads.host_counters == 0 and reads.total <= allowed, (reads.by_kind, reads.host_counters)
        totals.append(reads.total)
    assert totals[0] == totals[1]


@pytest.mark.parametrize("mode", ["compile", "graphs"])
def test_a_compiled_ppo_update_on_cuda_equals_the_eager_one(mode: str) -> None:
    """learner.compile on CUDA (graphs: the compiled forward and backward replayed as CUDA graphs) trains as eager
    does, within float32 round-off, over a few updates (the compiled function is reused, not recompiled)."""
    weights = {}
    for which in ("off", mode):
        case = make_case(name="ppo_continuous", device=CUDA, seed=0)
        case.algo.compile_mode = which
        for seed in range(3):
            stats = run_update(case=case, seed=seed)
        weights[which] = torch.nn.utils.parameters_to_vector(case.model.parameters()).detach().cpu()
        assert stats.num_gradient_steps > 0
    torch.testing.assert_close(weights[mode], weights["off"], atol=ATOL, rtol=RTOL)
