"""Learner updates on a CUDA-like device, proved on CPU: tests/device_audit.py classes every tensor as host or
device as a GPU run would, and fails an op CUDA would refuse (a CPU/device mix, numpy() of a device tensor).
What only a GPU proves (kernels, numerics against CPU) is in tests/gpu/test_cuda_learners.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.algo_batches import CASES, make_case, run_update
from tests.device_audit import DeviceAudit, DeviceMix, on_device


@pytest.mark.parametrize("name", sorted(CASES))
def test_update_mixes_no_devices(name: str) -> None:
    with DeviceAudit() as audit:
        case = make_case(name=name, device=torch.device("cpu"), seed=0, to_device=on_device)
        stats = run_update(case=case, seed=0)
    assert audit.ops > 100  # the audit saw the update
    assert stats is not None


def test_audit_catches_a_cpu_tensor_added_to_a_device_tensor() -> None:
    with DeviceAudit():
        device = on_device(np.ones(3, np.float32))
        with pytest.raises(DeviceMix, match="mixes a CPU tensor"):
            _ = device + torch.tensor([1.0, 2.0, 3.0])
        _ = device + torch.tensor(2.0)            # a 0-dim CPU tensor is legal on CUDA
        _ = device + torch.tensor([1.0, 2.0, 3.0]).to(torch.device("cpu"))  # moved explicitly: fine


def test_audit_catches_numpy_of_a_device_tensor() -> None:
    with DeviceAudit():
        device = on_device(np.ones(3, np.float32))
        with pytest.raises(DeviceMix, match="numpy"):
            device.numpy()
        assert device.cpu().numpy().tolist() == [1.0, 1.0, 1.0]
        params = torch.nn.Linear(3, 1).to(torch.device("cpu"))
        with pytest.raises(DeviceMix):
            params(torch.zeros(2, 3))             # a CPU batch into a device model
