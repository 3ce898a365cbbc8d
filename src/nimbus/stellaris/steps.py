"""The parameter function's arithmetic: which gradients are usable, and the optimizer steps of one aggregation.

Shared by the parameter function's aggregation (stellaris/parameter.py) and the rebuild of its resident state
(stellaris/resident.py), which replays logged aggregations with exactly these steps, so a rebuilt state equals the
one it replaces bit for bit.

* one step (the paper's Eq. 4 as the learning rate of the update: under Adam a scaled gradient barely changes
  the step, a scaled learning rate does): p.grad = the scale-weighted
  mean Σ_i s_i·g_i / Σ_i s_i, clipped to ``max_grad_norm``, then one optimizer step at learning rate
  α0 · mean_i(s_i);
* ``separate_steps`` (the authors' code): one clipped step per gradient, each at learning rate α0 · s_i.

After each optimizer step the algorithm's own bookkeeping runs (IMPACT's target network). The optimizer's
learning rate is left at α0 (the state published: α0, not the last step's scaled rate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from nimbus.stellaris.gradients import gradient_algo_for
from nimbus.stellaris.learner import GRAD_PREFIX

Scaled = tuple[dict[str, torch.Tensor], float]   # a gradient by parameter name, and its Eq. 4 scale


def apply_aggregation(*, state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer,
                      gradients: list[Scaled], separate_steps: bool, progress: float) -> None:
    """The optimizer step(s) of one aggregation of usable ``gradients`` (module docstring)."""
    config = state["algo"].config
    gradient_algo = gradient_algo_for(name=config.name)
    base_lr = gradient_algo.learning_rate(config=config, progress=progress)
    steps = [gradients] if not separate_steps else [[g] for g in gradients]
    for step in steps:
        _step(model=model, optimizer=optimizer, gradients=step, base_lr=base_lr, max_grad_norm=config.max_grad_norm)
        gradient_algo.after_step(model=model, config=config)
    for group in optimizer.param_groups:
        group["lr"] = base_lr


def usable_gradients(*, fetched: list[dict[str, np.ndarray]], model: nn.Module, keys: Sequence[str],
                     scales: Sequence[float]) -> tuple[list[Scaled], list[dict[str, str]]]:
    """(gradient, scale) of the gradients that match the model's parameters and are finite; the others named
    with a reason."""
    shapes = {name: tuple(p.shape) for name, p in trainable(model)}
    usable, refused = [], []
    for key, scale, grads in zip(keys, scales, fetched):
        reason = _problem(grads=grads, shapes=shapes)
        if reason is not None:
            refused.append({"key": key, "reason": reason})
            continue
        usable.append(({name: torch.from_numpy(np.array(g)) for name, g in grads.items()}, float(scale)))
    return usable, refused


def _problem(*, grads: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> str | None:
    if grads.keys() != shapes.keys():
        return f"parameters differ: {sorted(set(grads) ^ set(shapes))[:3]}"
    for name, grad in grads.items():
        if tuple(grad.shape) != shapes[name]:
            return f"{name}: shape {tuple(grad.shape)}, the model's is {shapes[name]}"
        if not np.isfinite(grad).all():
            return f"{name}: not finite"
    return None


def trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def _step(*, model: nn.Module, optimizer: torch.optim.Optimizer,
          gradients: list[Scaled], base_lr: float, max_grad_norm: float | None) -> None:
    """One step: p.grad = Σ s_i·g_i / Σ s_i, clipped, at learning rate base_lr · mean(s_i) (Eq. 4)."""
    params = trainable(model)
    total = sum(scale for _, scale in gradients)
    weights = [scale / total for _, scale in gradients] if total > 0 else [1.0 / len(gradients)] * len(gradients)
    for name, param in params:
        grad = sum(w * g[name] for w, (g, _) in zip(weights, gradients))
        if not isinstance(grad, torch.Tensor):   # sum() of no gradients is 0
            raise ValueError("a step needs at least one gradient")
        param.grad = grad.to(param.device, param.dtype)
    nn.utils.clip_grad_norm_([p for _, p in params], max_grad_norm if max_grad_norm is not None else float("inf"))
    for group in optimizer.param_groups:
        group["lr"] = base_lr * total / len(gradients)
    optimizer.step()


def stored_gradient(*, store: Any, key: str) -> dict[str, np.ndarray]:
    """The gradient a learner (or a recomputation) put under ``key``, by parameter name."""
    arrays = store.get(key=key).arrays
    return {name[len(GRAD_PREFIX):]: np.asarray(a) for name, a in arrays.items() if name.startswith(GRAD_PREFIX)}
