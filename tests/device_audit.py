"""A CPU stand-in for running learners on CUDA: flags, on a CPU-only machine, the device mixes CUDA rejects.

Every tensor is classed "host" or "device" as it would be on a GPU run whose learner device is ``device``:

* host: made by a factory without a ``device`` (``torch.tensor``, ``zeros``, ``arange``, ``randperm``...),
  ``torch.from_numpy``, ``.cpu()``, ``.to("cpu")``, or computed from host tensors only;
* device: ``nn.Parameter`` s, factories given a ``device``, ``.to(<torch.device>)``, anything computed from a
  device tensor.

An op that takes a host tensor with at least one dimension together with a device tensor raises
``DeviceMix`` (CUDA: "Expected all tensors to be on the same device"; a 0-dim CPU tensor mixes legally),
and so does ``.numpy()`` (or ``np.asarray``) of a device tensor (CUDA: "can't convert cuda tensor to numpy").
Indexing and copies, which CUDA allows across devices, are exempt.

What it cannot see: code that is right only because CUDA would also be right by accident, and kernels
(numerics) -- those are proved only by the ``gpu`` tests.

Example::

    with DeviceAudit():
        stats = algo.update(model=model, optimizer=optimizer, batch=batch, progress=0.0, generator=g)
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_HOST = "_nimbus_audit_host"
_FACTORIES = {torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.empty, torch.full, torch.arange,
              torch.randperm, torch.rand, torch.randn, torch.randint, torch.linspace, torch.eye, torch.from_numpy,
              torch.scalar_tensor}
_EXEMPT = {torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.copy_, torch.Tensor.index_put_,
           torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda}
_NUMPY = {torch.Tensor.numpy, torch.Tensor.__array__}


# numpy() views taken only after the code checked ``tensor.device.type == "cpu"`` itself (on CUDA the check
# sends it elsewhere; on this CPU stand-in it cannot), as (file suffix, function name)
_DEVICE_CHECKED = {("nimbus/models/weights.py", "_copy_into")}


def _guarded_by_a_device_check() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if (frame.f_code.co_filename.replace("\\", "/").endswith(tuple(f for f, _ in _DEVICE_CHECKED))
                and (frame.f_code.co_filename.split("src/")[-1], frame.f_code.co_name) in _DEVICE_CHECKED):
            return True
        frame = frame.f_back
    return False


class DeviceMix(AssertionError):
    """An op that CUDA would refuse: a CPU and a device tensor together, or numpy() of a device tensor."""


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def is_host(tensor: torch.Tensor) -> bool:
    return not isinstance(tensor, torch.nn.Parameter) and bool(getattr(tensor, _HOST, False))


def _explicit_device(args: tuple, kwargs: dict) -> str | None:
    """'host' / 'device' for a ``.to`` or factory call that names a device, else None."""
    named = kwargs.get("device")
    if named is None:
        named = next((a for a in args if isinstance(a, (str, torch.device))), None)
    if named is None:
        return None
    if isinstance(named, str) and named.startswith("cpu"):
        return "host"
    return "device"


class DeviceAudit(TorchFunctionMode):
    """Raise DeviceMix at the first op that would mix devices on CUDA (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        kwargs = kwargs or {}
        self.ops += 1
        inputs = _tensors(args) + _tensors(kwargs)
        if func in _NUMPY and inputs and not is_host(inputs[0]) and not _guarded_by_a_device_check():
            raise DeviceMix(f"{func.__name__} of a device tensor (shape {tuple(inputs[0].shape)})")
        if func not in _EXEMPT and func not in _FACTORIES:
            host = [t for t in inputs if is_host(t) and t.dim() > 0]
            device = [t for t in inputs if not is_host(t)]
            if host and device:
                raise DeviceMix(f"{getattr(func, '__qualname__', func)} mixes a CPU tensor of shape "
                                f"{tuple(host[0].shape)} with a device tensor of shape {tuple(device[0].shape)}")
        out = func(*args, **kwargs)
        return self._classify(func=func, args=args, kwargs=kwargs, inputs=inputs, out=out)

    def _classify(self, *, func, args: tuple, kwargs: dict, inputs: list[torch.Tensor], out: Any) -> Any:  # noqa: ANN001
        if not isinstance(out, torch.Tensor):
            for tensor in _tensors(out):  # e.g. torch.split, max() -> (values, indices): as their inputs
                self._mark(tensor, host=bool(inputs) and all(is_host(t) for t in inputs))
            return out
        named = _explicit_device(args[1:] if func in (torch.Tensor.to,) else args, kwargs) \
            if func in _FACTORIES or func is torch.Tensor.to else None
        if func is torch.Tensor.cpu:
            host = True
        elif named is not None:
            host = named == "host"
        elif func in _FACTORIES:
            first = args[0] if args else None
            host = is_host(first) if isinstance(first, torch.Tensor) else True
        else:
            host = bool(inputs) and all(is_host(t) for t in inputs)
        if out is not None and any(out is t for t in inputs) and is_host(out) != host:
            with torch._C.DisableTorchFunction():
                out = out.view_as(out)  # same storage, its own class (a real .to/.cpu would copy)
        return self._mark(out, host=host)

    @staticmethod
    def _mark(tensor: torch.Tensor, *, host: bool) -> torch.Tensor:
        if not isinstance(tensor, torch.nn.Parameter):
            try:
                setattr(tensor, _HOST, host)
            except (AttributeError, RuntimeError):
                pass
        return tensor


def on_device(array: Any) -> torch.Tensor:
    """A batch column as the learner puts it on its device (``torch.as_tensor(..., device=...)``)."""
    tensor = torch.as_tensor(array, device=torch.device("cpu"))
    return DeviceAudit._mark(tensor.clone(), host=False)
