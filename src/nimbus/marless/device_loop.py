"""What the multi-agent learners' gradient loops share so that nothing in them waits for the device: the rows of a
minibatch drawn on the learner's device, and per-step statistics kept there and read once per update.

The optimizer step itself is algos/step.py's ``guarded_step`` (the non-finite guard decided on the device: a skipped
step leaves the weights and the optimizer state as they were).

* ``host_draws``: a loop's random indices (each epoch's order, each step's rows) from the host generator the
  learners always used, on the device without a wait inside the loop (on the CPU the same sequence as ever; on a
  GPU the same indices, copied once).
* ``StepRows``: each step's statistics (a 1-D tensor in ``keys`` order) and whether the step was applied, kept as
  device tensors; ``read()`` fetches them in one transfer and gives the mean of each statistic over the applied
  steps as ``np.mean`` of the per-step values does (so the means are bitwise those of the per-step ``item()``
  reads they replace), and how many steps were skipped.

Example::

    rows = StepRows(keys=("loss", "q_mean"))
    for index in host_draws(draw=lambda: torch.randint(num_rows, (256,), generator=gen), count=steps, device=device):
        loss, q_mean = objective(batch=take(replay, index))
        outcome = guarded_step(optimizer=optimizer, params=params, loss=loss, max_grad_norm=10.0)
        rows.add(row=torch.stack([loss.detach(), q_mean]), applied=outcome.finite)
    means, skipped = rows.read()          # one host read
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch


def host_draws(*, draw: Callable[[], torch.Tensor], count: int, device: torch.device) -> Iterator[torch.Tensor]:
    """``count`` results of ``draw()`` (a host generator's random indices) on ``device``: on the CPU drawn one at a
    time as the loop asks, the sequence the learners always drew; on another device all drawn up front and copied
    in one asynchronous transfer, so the loop never waits for the host and the indices are the CPU's."""
    if device.type == "cpu":
        for _ in range(count):
            yield draw()
        return
    if count == 0:
        return
    host = torch.stack([draw() for _ in range(count)])
    yield from (host.pin_memory() if device.type == "cuda" else host).to(device, non_blocking=True)


class StepRows:
    """Per-step statistics and applied flags on the device; read once (see the module docstring)."""

    def __init__(self, *, keys: Sequence[str]) -> None:
        self.keys = tuple(keys)
        self.rows: list[torch.Tensor] = []
        self.applied: list[torch.Tensor] = []

    def add(self, *, row: torch.Tensor, applied: torch.Tensor) -> None:
        self.rows.append(row.detach().reshape(len(self.keys)))
        self.applied.append(applied.reshape(1))

    def read(self) -> tuple[dict[str, float], int]:
        """(mean of each statistic over the applied steps, NaN when none was; how many steps were skipped)."""
        if not self.rows:
            return dict.fromkeys(self.keys, math.nan), 0
        table = np.array(torch.cat([torch.stack(self.rows).to(torch.float64),
                                    torch.stack(self.applied).to(torch.float64)], dim=1).tolist())   # the one read
        kept = table[table[:, -1] > 0, :-1]
        means = {key: float(np.mean(np.ascontiguousarray(kept[:, j]))) if len(kept) else math.nan
                 for j, key in enumerate(self.keys)}
        return means, len(self.rows) - len(kept)
