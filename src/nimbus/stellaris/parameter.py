"""Stellaris's parameter function: aggregate admitted gradients, step the optimizer, publish version v+1.

The driver's aggregation rule (stellaris/rules.py) chose the members: gradient keys with their
scales (1/δ^(1/v) for the staleness-aware rules, else 1). Each gradient is checked before use: a
parameter missing, a shape that differs from the model's, or a NaN/Inf value refuses that gradient
(counted in ``refused``, never applied). A member with a ``recompute`` entry is first recomputed at its read
version on its task, truncated (Eq. 2) by the versions of the learners aggregated with it, which its learner
could not know at launch (issue 26 item 9; ``recomputed`` in the header counts them). The rest are combined:

* one step (the paper, Eq. 4 as the learning rate of the update, issue 26 item 7): p.grad = the
  scale-weighted mean Σ_i s_i·g_i / Σ_i s_i, clipped to ``max_grad_norm``, then one optimizer step at
  learning rate α0 · mean_i(s_i). With SGD that is exactly mean_i(α0·s_i·g_i), Eq. 4 per gradient; with
  Adam, whose step does not see a constant factor of its input, the factor still shrinks the step
  (× 2^(-1/3) = 0.794 for one gradient at δ 2, v 3, where scaling the gradient gave × 0.981), and clipping
  comes before the factor, so it cannot erase it;
* ``separate_steps`` (the authors' code): one clipped step per gradient, in the order given, each at
  learning rate α0 · s_i (their scales are 1).

After each optimizer step the algorithm's own bookkeeping runs (stellaris/gradients.py): IMPACT
counts the step and refreshes its target network every ``target_update_interval`` steps, so the target
travels with the weights of each version. Gradients cover the trainable parameters only (a target
network's are frozen).

Weights and optimizer state of v+1 are put with the invocation id as writer (a retry replaces its own
puts, P1). With no usable gradient nothing is published and the header says ``published: false``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from nimbus.data.codec import Message
from nimbus.data.store import Store
from nimbus.data.stores import function_store
from nimbus.models.weights import load_optimizer, optim_key
from nimbus.roles.learner import LearnerRequest, publish_version
from nimbus.runtime.base import FunctionContext
from nimbus.stellaris.gradients import gradient_algo_for
from nimbus.stellaris.learner import GRAD_PREFIX, GradientRequest, compute_gradient, gradient_state, model_at


@dataclass(frozen=True)
class ParameterRequest:
    model: dict[str, Any]          # a GradientRequest's header fields (env, algo, policy, device) for the model
    policy_version: int            # the version the step starts from; it publishes policy_version + 1
    has_optimizer_state: bool
    keys: Sequence[str]
    scales: Sequence[float]
    separate_steps: bool
    progress: float
    # per member: None (its gradient as its learner put it) or what recomputing it with the truncation by its
    # co-members needs: {"batch_key", "read_version", "peer_versions", "truncation", "rho", "progress"}
    recompute: Sequence[dict[str, Any] | None] = ()

    def to_message(self, *, positions: Sequence[np.ndarray | None] = ()) -> Message:
        """``positions``: each recomputed member's task (None for the others)."""
        arrays = {f"positions.{i}": p.astype(np.int64) for i, p in enumerate(positions) if p is not None}
        return Message(header={"parameter": dict(vars(self)), "_affinity": f"parameter-{self.model['policy']}"},
                       arrays=arrays)

    @classmethod
    def from_message(cls, message: Message) -> "ParameterRequest":
        return cls(**message.header["parameter"])


def parameter_function(*, context: FunctionContext, request: Message) -> Message:
    req = ParameterRequest.from_message(request)
    started = time.perf_counter()
    model_req = GradientRequest(**req.model)
    store = function_store(header=request.header)
    state = gradient_state(context=context, req=model_req)
    model = model_at(state=state, store=store, policy=model_req.policy, version=req.policy_version, slot="param")
    optimizer = _optimizer(state=state, store=store, model=model, req=req, policy=model_req.policy)
    fetched = _member_gradients(state=state, store=store, req=req, model_req=model_req, request=request)
    gradients, refused = _usable_gradients(fetched=fetched, model=model, keys=req.keys, scales=req.scales)
    if not gradients:
        return Message(header={"published": False, "policy_version": req.policy_version, "refused": refused,
                               "applied": 0, "parameter_s": time.perf_counter() - started})
    config = state["algo"].config
    gradient_algo = gradient_algo_for(name=config.name)
    base_lr = gradient_algo.learning_rate(config=config, progress=req.progress)
    steps = [gradients] if not req.separate_steps else [[g] for g in gradients]
    for step in steps:
        _step(model=model, optimizer=optimizer, gradients=step, base_lr=base_lr, max_grad_norm=config.max_grad_norm)
        gradient_algo.after_step(model=model, config=config)
    for group in optimizer.param_groups:   # the state published: α0, not the last step's scaled rate
        group["lr"] = base_lr
    publish_version(store=store, state=state, req=_as_learner_request(req=req, policy=model_req.policy),
                    model=model, optimizer=optimizer, writer=context.invocation_id)
    new_version = req.policy_version + 1
    state["models"]["param"] = ((model_req.policy, new_version), model)
    state["param_optimizer"] = ((model_req.policy, new_version), optimizer)
    return Message(header={"published": True, "policy_version": new_version, "refused": refused,
                           "applied": len(gradients), "parameter_s": time.perf_counter() - started,
                           "recomputed": sum(r is not None for r in req.recompute),
                           "device": str(state["device"])})


def _member_gradients(*, state: dict[str, Any], store: Store, req: ParameterRequest, model_req: GradientRequest,
                      request: Message) -> list[dict[str, np.ndarray]]:
    """Each member's gradient by parameter name: as its learner put it, or recomputed at its read version with the
    IS truncation by the versions of the learners aggregated with it (issue 26 item 9)."""
    fetched = []
    for index, key in enumerate(req.keys):
        redo = req.recompute[index] if index < len(req.recompute) else None
        if redo is None:
            arrays = store.get(key=key).arrays
            fetched.append({name[len(GRAD_PREFIX):]: np.asarray(a) for name, a in arrays.items()
                            if name.startswith(GRAD_PREFIX)})
            continue
        member_req = replace(model_req, policy_version=redo["read_version"], batch_key=redo["batch_key"],
                             grad_key=key, peer_versions=list(redo["peer_versions"]), truncation=redo["truncation"],
                             rho=redo["rho"], progress=redo["progress"])
        computed = compute_gradient(state=state, store=store, req=member_req,
                                    positions=np.asarray(request.arrays[f"positions.{index}"]))
        fetched.append({name: (p.grad.detach().cpu().numpy() if computed.finite
                               else np.full(tuple(p.shape), np.nan, np.float32))
                        for name, p in computed.model.named_parameters() if p.grad is not None})
    return fetched


Scaled = tuple[dict[str, torch.Tensor], float]   # a gradient by parameter name, and its Eq. 4 scale


def _usable_gradients(*, fetched: list[dict[str, np.ndarray]], model: nn.Module, keys: Sequence[str],
                      scales: Sequence[float]) -> tuple[list[Scaled], list[dict[str, str]]]:
    """(gradient, scale) of the gradients that match the model's parameters and are finite; the others named
    with a reason."""
    shapes = {name: tuple(p.shape) for name, p in _trainable(model)}
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


def _trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def _step(*, model: nn.Module, optimizer: torch.optim.Optimizer,
          gradients: list[Scaled], base_lr: float, max_grad_norm: float | None) -> None:
    """One step: p.grad = Σ s_i·g_i / Σ s_i, clipped, at learning rate base_lr · mean(s_i) (Eq. 4; docstring)."""
    trainable = _trainable(model)
    total = sum(scale for _, scale in gradients)
    weights = [scale / total for _, scale in gradients] if total > 0 else [1.0 / len(gradients)] * len(gradients)
    for name, param in trainable:
        param.grad = sum(w * g[name] for w, (g, _) in zip(weights, gradients)).to(param.device, param.dtype)
    nn.utils.clip_grad_norm_([p for _, p in trainable], max_grad_norm if max_grad_norm is not None else float("inf"))
    for group in optimizer.param_groups:
        group["lr"] = base_lr * total / len(gradients)
    optimizer.step()


def _optimizer(*, state: dict[str, Any], store: Store, model: nn.Module, req: ParameterRequest,
               policy: str) -> torch.optim.Optimizer:
    held = state.get("param_optimizer")
    if held is not None and held[0] == (policy, req.policy_version) and state["models"]["param"][1] is model:
        return held[1]
    optimizer = state["algo"].make_optimizer(model=model)
    if req.has_optimizer_state:
        load_optimizer(optimizer=optimizer, message=store.get(key=optim_key(policy=policy, version=req.policy_version)))
    return optimizer


def _as_learner_request(*, req: ParameterRequest, policy: str) -> LearnerRequest:
    """publish_version reads only the policy and version of its request."""
    return LearnerRequest(env_id="", env_kwargs={}, algo={}, policy=policy, policy_version=req.policy_version,
                          has_optimizer_state=True, buffer={}, progress=req.progress, seed=0, device="cpu",
                          torch_threads=1)
