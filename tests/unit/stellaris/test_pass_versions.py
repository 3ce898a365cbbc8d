"""A slice's passes never share a version (stellaris/filling.py): a free slot takes the first task whose slice no pass
read at the newest version; when no newer version can come, the watchdog drops the passes that would repeat one."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from nimbus.stellaris.filling import SliceFilling
from nimbus.stellaris.slices import Slice


def filling(*, read: dict[str, int]) -> SimpleNamespace:
    """What ``next_task`` and ``drop_repeated_passes`` read of a SliceFilling: the versions read, the open batches."""
    pieces = [Slice(key=f"batch/main/r0/s{i}", index=i, rows=4, positions=np.arange(4)) for i in range(2)]
    batch = SimpleNamespace(tasks=[(p, piece.index, piece) for p in range(2) for piece in pieces], outstanding=4,
                            round=SimpleNamespace(index=0))
    return SimpleNamespace(slice_read=dict(read), batches=[batch])


def test_a_pass_waits_for_a_version_its_slice_was_not_read_at() -> None:
    flow = filling(read={"batch/main/r0/s0": 3})
    batch = flow.batches[0]
    assert SliceFilling.next_task(flow, batch=batch, version=3) == 1          # s1's first pass: s0 was read at 3
    flow.slice_read["batch/main/r0/s1"] = 3
    assert SliceFilling.next_task(flow, batch=batch, version=3) is None       # both read at 3: wait for version 4
    assert SliceFilling.next_task(flow, batch=batch, version=4) == 0


def test_the_watchdog_drops_only_the_passes_that_would_repeat_a_gradient() -> None:
    flow = filling(read={"batch/main/r0/s0": 3, "batch/main/r0/s1": 2})
    SliceFilling.drop_repeated_passes(flow, version=3)
    batch = flow.batches[0]
    assert [(p, i) for p, i, _ in batch.tasks] == [(0, 1), (1, 1)] and batch.outstanding == 2
