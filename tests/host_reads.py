"""Counting host reads (device → host round-trips) while code runs, for the tests that bound a learner update's.

A host read is anything that makes the host wait for the device's result: a scalar read (``item()``, ``float(t)``,
``bool(t)``, ``int(t)``: all ``aten._local_scalar_dense``), ``torch.equal``, a data-dependent shape (``nonzero``,
boolean-mask indexing, ``masked_select``, ``unique``), and the Python-side copies ``tolist()``, ``numpy()`` and
``cpu()``. On the CPU none of these waits, but each is where a CUDA stream would synchronise, so counting them on
the CPU bounds what the same code does on a GPU.

A non-capturable torch optimizer (Adam's foreach and per-tensor forms) keeps each parameter's ``step`` count as a
host tensor on every device and reads it with ``item()`` in each step; that read never waits for a device. Pass
the optimizers as ``optimizers=`` and those reads are counted apart, in ``HostReads.host_counters`` (the fused
optimizer nimbus uses on CUDA makes none).

Example::

    with count_host_reads(optimizers=[optimizer]) as reads:
        ppo_update(model=model, optimizer=optimizer, batch=batch, config=config, progress=0.0, generator=gen)
    assert reads.total <= 4, reads.by_kind
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops whose result the host must wait for: a scalar, or a shape that depends on the data
SYNCING_OPS = {
    "aten::_local_scalar_dense": "scalar",
    "aten::equal": "equal",
    "aten::nonzero": "nonzero",
    "aten::nonzero_numpy": "nonzero",
    "aten::masked_select": "masked_select",
    "aten::_unique2": "unique",
    "aten::unique_dim": "unique",
    "aten::unique_consecutive": "unique",
}
MASK_INDEX_OPS = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}
# Tensor methods that copy to Python or host memory without passing the dispatcher on the CPU
COPY_METHODS = ("tolist", "numpy", "cpu")


@dataclass
class HostReads:
    """What `count_host_reads` saw: ``by_kind`` maps "scalar", "tolist", "nonzero" ... to a count."""

    by_kind: Counter = field(default_factory=Counter)
    host_counters: int = 0  # reads of a non-capturable optimizer's host-side step counts (not in ``total``)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())


class _SyncCounter(TorchDispatchMode):
    def __init__(self, reads: HostReads, optimizers: tuple[torch.optim.Optimizer, ...]) -> None:
        super().__init__()
        self.reads = reads
        self.optimizers = optimizers

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        kind = SYNCING_OPS.get(name)
        if kind == "scalar" and self._is_host_step_count(args[0]):
            self.reads.host_counters += 1
            return func(*args, **(kwargs or {}))
        if kind is None and name in MASK_INDEX_OPS and _has_bool_index(args):
            kind = "mask_index"  # x[mask] and x[mask] = v find the mask's true rows on the host
        if kind is not None:
            self.reads.by_kind[kind] += 1
        return func(*args, **(kwargs or {}))


    def _is_host_step_count(self, tensor: torch.Tensor) -> bool:
        return tensor.device.type == "cpu" and any(
            state.get("step") is tensor for optimizer in self.optimizers for state in optimizer.state.values())


def _has_bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in indices or ())


@contextmanager
def count_host_reads(*, optimizers: tuple[torch.optim.Optimizer, ...] | list = ()) -> Iterator[HostReads]:
    """Counts host reads made by this thread's torch code inside the block (see the module docstring); reads of
    ``optimizers``' host-side step counts are counted apart."""
    reads = HostReads()
    originals = {name: getattr(torch.Tensor, name) for name in COPY_METHODS}

    def counting(name: str):
        original = originals[name]

        def method(self, *args, **kwargs):
            reads.by_kind[name] += 1
            return original(self, *args, **kwargs)

        return method

    for name in COPY_METHODS:
        setattr(torch.Tensor, name, counting(name))
    try:
        with _SyncCounter(reads, tuple(optimizers)):
            yield reads
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def decide_on_the_device(monkeypatch) -> None:
    """Makes `guarded_step` decide its non-finite guard on the device, as it does on an accelerator, so a count taken
    on the CPU bounds what a GPU update does (on the CPU it reads its finite flag instead: `decides_on_host`)."""
    monkeypatch.setattr("nimbus.algos.step.decides_on_host", lambda *, device: False)
