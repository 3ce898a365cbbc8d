"""The device pool places work (issue 25.3): a learner-side function computes on the device its lease names,
not on ``learner.device``; the ledger row names the lease and the device memory it held."""

from __future__ import annotations

import torch

from nimbus.cost.ledger import Ledger
from nimbus.run.loop import train


def test_the_learner_computes_on_the_leased_device_whatever_learner_device_says(make_config) -> None:
    """``learner.device: cuda`` on a machine without CUDA fails the first update unless the lease (a CPU slot)
    decides the device; before leases placed work, this run ended in FunctionFailed."""
    assert not torch.cuda.is_available() or torch.cuda.device_count() > 0
    torch.set_num_threads(1)
    config = make_config(overrides=["train.total_env_steps=1024", "train.target_return=1000",
                                    "devices.pool=on_demand", "devices.kind=cpu", "devices.cpu_slots=1",
                                    f"learner.device={'cpu' if torch.cuda.is_available() else 'cuda'}"])
    result = train(config=config)
    rows = Ledger.load(path=result.run_dir / "ledger.jsonl")
    learners = [r for r in rows if r.kind == "learner" and r.outcome == "ok"]
    assert result.summary.rounds >= 2 and len(learners) == result.summary.rounds
    assert all(r.device == "cpu:0" for r in learners)
    assert all(r.device_peak_bytes is None for r in learners)  # measured on CUDA leases only
