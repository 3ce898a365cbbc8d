"""Stellaris's parameter function: aggregate admitted gradients, step the optimizer, publish version v+1.

The driver's aggregation rule (stellaris/rules.py) chose the members: gradient keys with their
scales (1/δ^(1/v) for the staleness-aware rules, else 1). Each gradient is checked before use: a
parameter missing, a shape that differs from the model's, or a NaN/Inf value refuses that gradient
(counted in ``refused``, never applied). A member with a ``recompute`` entry is first recomputed at its read
version on its task, truncated (Eq. 2) by the versions of the learners aggregated with it, which its learner
could not know at launch (``recomputed`` in the header counts them). The rest are combined:

* one step (the paper's Eq. 4 as the learning rate of the update): p.grad = the
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

Weights of v+1 are put with the invocation id as writer (a retry replaces its own puts, P1), and its optimizer
state too unless the state is resident (``resident``: stellaris/resident.py keeps model and optimizer in the
worker, rebuilds them from the Store's last full state and a replay log when lost, and the optimizer state is put
only when asked, ``publish_state``, or exported for a checkpoint, ``export``). With no usable gradient nothing is
published and the header says ``published: false``. The steps themselves: stellaris/steps.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from nimbus.data.codec import Message
from nimbus.data.request import WireRequest
from nimbus.data.result import WireResult
from nimbus.data.store import Store
from nimbus.data.stores import function_store
from nimbus.models.weights import load_optimizer, optim_key
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.faults import fault_point
from nimbus.stellaris.learner import (
    GRAD_PREFIX,
    GradientRequest,
    compute_gradient,
    gradient_arrays,
    gradient_state,
    model_at,
)
from nimbus.stellaris.recompute import CachedSources, recompute_cache, remember_version
from nimbus.stellaris.resident import Held, has_key, keep_resident, publish, recomputed_key, resident_at, take_resident
from nimbus.stellaris.steps import apply_aggregation, stored_gradient, usable_gradients


@dataclass(frozen=True)
class ParameterResult(WireResult):
    """What the parameter function returns: whether it published a version, and the members it refused."""

    published: bool
    policy_version: int          # the published version, or the one it held when it published none
    parameter_s: float
    rebuilt: bool = False        # the resident state was rebuilt from the anchor and the replay log
    refused: list[dict[str, Any]] = field(default_factory=list)   # {"key", "reason"} per refused member
    applied: int = 0             # members aggregated into the step
    recomputed: int = 0          # members whose truncation was recomputed with their co-members (Eq. 2)
    exported: bool = False       # the state was only exported to the Store (a checkpoint's optimizer state)
    device: str = ""


@dataclass(frozen=True)
class ParameterRequest(WireRequest, header="parameter", affinity="parameter-{model[policy]}"):
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
    # run_key: the run's (the worker's caches, stellaris/recompute.py, hold only this run's versions)
    # the resident parameter function (stellaris/resident.py): keep the state in the worker under run_key, publish
    # the optimizer state only with publish_state; replay: the aggregations from the anchor (policy_version −
    # len(replay), whose full state is in the Store; has_optimizer_state says whether it has optimizer state);
    # export: no aggregation, only put the optimizer state of policy_version (a checkpoint needs it)
    resident: bool = False
    run_key: str = ""
    replay: Sequence[dict[str, Any]] = ()
    publish_state: bool = True
    export: bool = False

    def to_message(self, *, positions: Sequence[np.ndarray | None] = ()) -> Message:
        """``positions``: each recomputed member's task (None for the others)."""
        arrays = {f"positions.{i}": p.astype(np.int64) for i, p in enumerate(positions) if p is not None}
        return self.wire_message(arrays=arrays)


def parameter_function(*, context: FunctionContext, request: Message) -> Message:
    req = ParameterRequest.from_message(request)
    started = time.perf_counter()
    model_req = GradientRequest(**req.model)
    store = function_store(header=request.header)
    state = gradient_state(context=context, req=model_req)
    if req.export:
        return _export(state=state, store=store, req=req, policy=model_req.policy, writer=context.invocation_id)
    held, rebuilt = _held(state=state, store=store, req=req, policy=model_req.policy)
    model, optimizer = held
    fetched = _member_gradients(state=state, store=store, req=req, model_req=model_req, request=request,
                                writer=context.invocation_id)
    gradients, refused = usable_gradients(fetched=fetched, model=model, keys=req.keys, scales=req.scales)
    if not gradients:
        if req.resident:   # nothing stepped: the state still holds policy_version
            keep_resident(state=state, run_key=req.run_key, policy=model_req.policy, version=req.policy_version,
                          held=held)
        return ParameterResult(published=False, policy_version=req.policy_version, refused=refused, applied=0,
                               parameter_s=time.perf_counter() - started, rebuilt=rebuilt).wire_message()
    apply_aggregation(state=state, model=model, optimizer=optimizer, gradients=gradients,
                      separate_steps=req.separate_steps, progress=req.progress)
    new_version = req.policy_version + 1
    publish(store=store, state=state, policy=model_req.policy, version=new_version, held=held, weights=True,
            optimizer=req.publish_state, writer=context.invocation_id)
    fault_point(name="parameter.published")
    remember_version(state=state, run_key=req.run_key, policy=model_req.policy, version=new_version, model=model)
    if req.resident:
        keep_resident(state=state, run_key=req.run_key, policy=model_req.policy, version=new_version, held=held)
    else:
        state["models"]["param"] = ((model_req.policy, new_version), model)
        state["param_optimizer"] = ((model_req.policy, new_version), optimizer)
    return ParameterResult(published=True, policy_version=new_version, refused=refused, applied=len(gradients),
                           parameter_s=time.perf_counter() - started,
                           recomputed=sum(r is not None for r in req.recompute), rebuilt=rebuilt,
                           device=str(state["device"])).wire_message()


def _held(*, state: dict[str, Any], store: Store, req: ParameterRequest, policy: str) -> tuple[Held, bool]:
    """The model and optimizer at ``req.policy_version``: resident (stellaris/resident.py), or, without
    ``resident``, the warm worker's if it produced that version, else loaded from its full state in the Store."""
    if req.resident:
        return take_resident(state=state, store=store, run_key=req.run_key, policy=policy,
                             version=req.policy_version, replay=req.replay,
                             has_optimizer_state=req.has_optimizer_state)
    model = model_at(state=state, store=store, policy=policy, version=req.policy_version, slot="param")
    return (model, _optimizer(state=state, store=store, model=model, req=req, policy=policy)), False


def _export(*, state: dict[str, Any], store: Store, req: ParameterRequest, policy: str, writer: str) -> Message:
    """Put the optimizer state of ``req.policy_version`` (a checkpoint needs it), rebuilt if not resident."""
    started = time.perf_counter()
    held, rebuilt = resident_at(state=state, store=store, run_key=req.run_key, policy=policy,
                                version=req.policy_version, replay=req.replay,
                                has_optimizer_state=req.has_optimizer_state)
    if not has_key(store=store, key=optim_key(policy=policy, version=req.policy_version)):   # else put meanwhile
        publish(store=store, state=state, policy=policy, version=req.policy_version, held=held, weights=False,
                optimizer=True, writer=writer)
    return ParameterResult(published=False, exported=True, policy_version=req.policy_version, rebuilt=rebuilt,
                           parameter_s=time.perf_counter() - started).wire_message()


def _member_gradients(*, state: dict[str, Any], store: Store, req: ParameterRequest, model_req: GradientRequest,
                      request: Message, writer: str) -> list[dict[str, np.ndarray]]:
    """Each member's gradient by parameter name: as its learner put it, or recomputed at its read version with the
    IS truncation by the versions of the learners aggregated with it."""
    fetched = []
    sources = CachedSources(state=state, store=store, policy=model_req.policy,
                            cache=recompute_cache(state=state, run_key=req.run_key))
    for index, key in enumerate(req.keys):
        redo = req.recompute[index] if index < len(req.recompute) else None
        if redo is None:
            fetched.append(stored_gradient(store=store, key=key))
            continue
        member_req = replace(model_req, policy_version=redo["read_version"], batch_key=redo["batch_key"],
                             grad_key=key, peer_versions=list(redo["peer_versions"]), truncation=redo["truncation"],
                             rho=redo["rho"], progress=redo["progress"])
        computed = compute_gradient(state=state, store=store, req=member_req, sources=sources,
                                    positions=np.asarray(request.arrays[f"positions.{index}"]))
        gradient = gradient_arrays(model=computed.model) if computed.finite else \
            {name: np.full(tuple(p.shape), np.nan, np.float32) for name, p in computed.model.named_parameters()
             if p.requires_grad}
        if req.resident:   # a replay reads it as applied (stellaris/resident.py)
            store.put(key=recomputed_key(key=key), writer=writer, message=Message(
                header={}, arrays={GRAD_PREFIX + name: g for name, g in gradient.items()}))
        fetched.append(gradient)
    return fetched


def _optimizer(*, state: dict[str, Any], store: Store, model: nn.Module, req: ParameterRequest,
               policy: str) -> torch.optim.Optimizer:
    held = state.get("param_optimizer")
    if held is not None and held[0] == (policy, req.policy_version) and state["models"]["param"][1] is model:
        return held[1]
    optimizer = state["algo"].make_optimizer(model=model)
    if req.has_optimizer_state:
        load_optimizer(optimizer=optimizer, message=store.get(key=optim_key(policy=policy, version=req.policy_version)))
    return optimizer
