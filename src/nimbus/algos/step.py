"""The optimizer step every single-agent learner takes, without a host read: the non-finite guard is decided on the
device, and statistics stay device tensors until the update reads them once.

A host read (``item()``, ``tolist()``, ``float(t)``) makes the host wait for the device; inside a minibatch loop
it stops the host from queueing the next minibatch's kernels while the device works, which on a GPU costs more
than the arithmetic of a small network. So:

- `guarded_step` clips and steps; a step whose loss or gradient norm is not finite changes nothing: a fused
  optimizer (nimbus's Adam on CUDA and on the CPU) skips it inside its kernel (``found_inf``, as ``GradScaler``
  does); a non-fused one on the CPU has the flag read and the step skipped (a CPU read waits for no device, and is
  cheaper than the restore below); any other optimizer on an accelerator steps unconditionally and has its
  parameters and state put back from a copy taken before the step (the gradients are zeroed first so the throw-away
  step stays finite). Adam's moments and step count are therefore never polluted by a NaN minibatch.
- `DeviceStats` sums named scalars in float64 on the device (the same sums as Python floats of the float32
  values) and `read()` fetches them in one transfer.
- `make_adam`: fused on CUDA and the CPU, multi-tensor (foreach) elsewhere; capturable where the step is
  captured in a graph (CUDA).

Example::

    stats = DeviceStats(keys=("loss", "grad_norm"), device=loss.device)
    outcome = guarded_step(optimizer=optimizer, params=list(model.parameters()), loss=loss, max_grad_norm=0.5)
    stats.add(row=torch.stack([loss.detach(), outcome.grad_norm]), where=outcome.finite)
    means, num_steps, _ = stats.read()   # ({"loss": ..., "grad_norm": ...}, steps applied): one host read
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from nimbus.liveness import beat


def make_adam(*, params: Iterable, lr: float, eps: float = 1e-8, device: torch.device,
              capturable: bool = False) -> torch.optim.Adam:
    """Adam over ``params`` (tensors or param groups): fused on CUDA and on the CPU (one kernel for every tensor; it
    skips a non-finite step itself and reads no step count on the host), foreach elsewhere; ``capturable`` keeps a
    CUDA Adam's step on the device so the step can be captured in a CUDA graph. On the CPU the fused step is ~0.11 ms
    cheaper than foreach's for a 64x64 or 256x256 network (60 against 170 us here: ~7 % of a PPO or DQN minibatch
    step) and agrees with it to float32 round-off, not bitwise."""
    if device.type == "cuda":
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True, capturable=capturable)
    if device.type == "cpu":
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


def param_device(module: nn.Module) -> torch.device:
    """Where ``module``'s parameters live (the CPU for a module without any)."""
    return next(iter(module.parameters()), torch.empty(0)).device


def all_finite(*, tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """Whether every element of ``tensors`` is finite, as a 0-dim bool on their device: a caller that needs a
    Python bool (a learner checking its weights after an update) then reads the host once, not once per tensor."""
    flags = [torch.isfinite(tensor).all() for tensor in tensors]
    return torch.stack(flags).all() if flags else torch.ones((), dtype=torch.bool)


class StepState(Protocol):
    """A parameter's optimizer state by lookup (an optimizer's ``state``)."""

    def get(self, param: torch.Tensor, default: Any = None, /) -> Any: ...


class Stepped(Protocol):
    """What `guarded_step` reads and calls of an optimizer: a torch one, or several stepped as one (MARLess's
    team update, marless/team_learner.py)."""

    @property
    def defaults(self) -> dict[str, Any]: ...

    @property
    def param_groups(self) -> list[dict[str, Any]]: ...

    @property
    def state(self) -> StepState: ...

    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def step(self) -> Any: ...


@dataclass(frozen=True)
class StepOutcome:
    grad_norm: torch.Tensor  # 0-dim, before clipping (NaN or inf when not finite)
    finite: torch.Tensor     # 0-dim bool: the step was applied


def guarded_step(*, optimizer: Stepped, params: Sequence[torch.Tensor], loss: torch.Tensor,
                 max_grad_norm: float | None) -> StepOutcome:
    """Backward, clip ``params``' gradient norm to ``max_grad_norm`` (None: measure only), step; a step whose loss
    or gradient norm is not finite changes neither the parameters nor the optimizer's state. No host read on an
    accelerator (on the CPU one, which waits for nothing: `decides_on_host`)."""
    beat()  # progress per minibatch (P5), a skipped one too
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grads = [p.grad for p in params if p.grad is not None]
    if max_grad_norm is None:
        norm = nn.utils.get_total_norm(grads) if grads else torch.zeros((), device=loss.device)
    else:
        norm = nn.utils.clip_grad_norm_(params, max_grad_norm)
    finite = torch.isfinite(loss.detach()) & torch.isfinite(norm)
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = (~finite).to(torch.float32)  # type: ignore[attr-defined]  # read by the fused kernel
        try:
            optimizer.step()
        finally:  # a later plain step() of this optimizer must not inherit the flag
            optimizer.found_inf = None  # type: ignore[attr-defined]
    elif decides_on_host(device=finite.device):
        if finite:  # a CPU tensor: reading it is a memory load, there is no device to wait for
            optimizer.step()
    else:
        _step_or_restore(optimizer=optimizer, finite=finite)
    return StepOutcome(grad_norm=norm, finite=finite)


def decides_on_host(*, device: torch.device) -> bool:
    """Whether `guarded_step` reads a non-fused optimizer's finite flag to skip a step rather than stepping and
    restoring on the device. True on the CPU: the read waits for nothing there, and the backup and restore cost more
    than a small network's step (+0.3 ms, +30 % of a 64x64 PPO minibatch step on this project's CPU benchmark box;
    docs/benchmarks.md, "The learner update"). An accelerator decides on the device."""
    return device.type == "cpu"


@torch.no_grad()
def _step_or_restore(*, optimizer: Stepped, finite: torch.Tensor) -> None:
    """Step, then put every tensor the step touched back where ``finite`` is false: ``lerp`` with weight 0 or 1
    returns its start or its end exactly, so a finite step is bitwise the plain step."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    for p in params:  # a NaN gradient would make the throw-away step NaN, and NaN survives any blend
        torch.nan_to_num_(p.grad, nan=0.0, posinf=0.0, neginf=0.0)
    kept = [*params, *_state_tensors(optimizer=optimizer, params=params)]
    backup = torch._foreach_mul(kept, 1.0)  # one multi-tensor copy (x · 1 is exact)
    had_state = {id(p) for p in params if optimizer.state.get(p)}
    optimizer.step()
    if kept:
        torch._foreach_lerp_(kept, backup, _flags(flag=~finite, like=kept))
    # state the step created (a parameter's first step): back to zeros, Adam's fresh state, when not finite
    fresh = _state_tensors(optimizer=optimizer, params=[p for p in params if id(p) not in had_state])
    if fresh:
        torch._foreach_mul_(fresh, _flags(flag=finite, like=fresh))


def _flags(*, flag: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``flag`` as 0/1 in each tensor's dtype and device (a non-capturable optimizer keeps its step count on the
    host: that one copy is the only host transfer, and only for an optimizer that is neither fused nor on the CPU)."""
    cache: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
    return [cache.setdefault((t.device, t.dtype), flag.to(device=t.device, dtype=t.dtype)) for t in like]


def _state_tensors(*, optimizer: Stepped, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [value for p in params for value in optimizer.state.get(p, {}).values()
            if isinstance(value, torch.Tensor) and value.is_floating_point()]


class DeviceStats:
    """Float64 sums of named 0-dim statistics on the device, counted where a step was finite; read once."""

    def __init__(self, *, keys: Sequence[str], device: torch.device) -> None:
        self.keys = tuple(keys)
        self.sums = torch.zeros(len(self.keys), dtype=torch.float64, device=device)
        self.count = torch.zeros((), dtype=torch.float64, device=device)

    def add(self, *, row: torch.Tensor, where: torch.Tensor) -> None:
        """Add ``row`` (one value per key, in order) where ``where`` is true: a skipped step adds nothing, not even
        its NaN."""
        self.sums = self.sums + torch.where(where, row.detach().to(torch.float64), 0.0)
        self.count = self.count + where.to(torch.float64)

    def read(self, *, extra: Sequence[torch.Tensor] = ()) -> tuple[dict[str, float], int, list[float]]:
        """(means over the counted steps, NaN when none; how many were counted; ``extra``'s 0-dim tensors as
        floats): one host read for all."""
        parts = [self.count.reshape(1), self.sums, *(value.detach().to(torch.float64).reshape(1) for value in extra)]
        values = torch.cat(parts).tolist()
        count, sums, rest = int(values[0]), values[1:1 + len(self.keys)], values[1 + len(self.keys):]
        means = {key: (total / count if count else float("nan")) for key, total in zip(self.keys, sums, strict=True)}
        return means, count, rest
