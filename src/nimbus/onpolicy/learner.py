"""The learner function: read a batch from the shared buffer, update the policy, publish v+1.

It runs inside a runtime worker. The authoritative learner state lives in the Store
(``weights/<policy>/<v>`` and ``optim/<policy>/<v>``), so any worker can run any update; a warm worker
whose cached model already holds version v skips the reload (that is the warm start; roles/learner.py). The batch is
gathered from the ARTOS buffer's shared memory by the row indices the driver's replay strategy chose
(``Buffer.read``: one copy per key, which the batch tensors then share) — or, on the ``ray`` runtime,
copied out of the Store value ``batch_key`` the driver wrote (the buffer may be on another node).
The Store itself is opened from the request's ``_store`` descriptor (data/stores.py).

With a ``probe`` block in the request (Nitro), the updated policy's Hessian is probed after the
update (nitro/probe.py) and the result header carries ``extras``: ``hessian_ratio``,
``hessian_lambda_max``, ``hessian_lambda_min``, ``probe_s``... (``{}`` without a probe).

A non-finite loss or gradient skips the step and keeps the weights (the version still advances, so
the round completes); the driver stops the run after ``max_nonfinite_losses`` in a row.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import asdict

import numpy as np
import torch

from nimbus.data.buffer import Buffer
from nimbus.data.codec import Message
from nimbus.data.store import Store
from nimbus.data.stores import function_store
from nimbus.envs.obsnorm import merge, pop_moments
from nimbus.nitro.probe import probe_after_update
from nimbus.roles.actor import derive_seed
from nimbus.roles.learner import LearnerRequest, LearnerResult, learner_state, publish_version, restore_state
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.faults import armed, fault_point


def init_worker() -> None:
    """Run once when a learner worker starts (runtime/worker.py): the first use of a torch.optim optimizer
    imports torch._dynamo (~1 s), which would otherwise sit on round 0's critical path."""
    import torch._dynamo  # noqa: F401


def learner_function(*, context: FunctionContext, request: Message) -> Message:
    if "pipeline" in request.header:  # ARTOS pipelines: rows are streamed as actors land (onpolicy/pipeline_learner.py)
        from nimbus.onpolicy.pipeline_learner import pipelined_learner_function
        return pipelined_learner_function(context=context, request=request)
    req = LearnerRequest.from_message(request)
    started = time.perf_counter()
    state = learner_state(context=context, req=req, store=function_store(header=request.header))
    batch = _read_batch(context=context, req=req, indices=request.arrays["indices"], device=state["device"])
    transfer_s = time.perf_counter() - started
    algo, model, optimizer = state["algo"], state["model"], state["optimizer"]
    generator = torch.Generator().manual_seed(derive_seed(req.seed, req.policy_version, 2))
    snapshot = [p.detach().clone() for p in model.parameters()]
    compute_started = time.perf_counter()
    _arm_step_fault(optimizer=optimizer)
    batch = algo.postprocess(batch=batch)
    stats = algo.update(model=model, optimizer=optimizer, batch=batch, progress=req.progress, generator=generator)
    compute_s = time.perf_counter() - compute_started
    stats_dict = {k: float(v) for k, v in asdict(stats).items()}
    nonfinite = not all(np.isfinite(v) for v in stats_dict.values()) or \
        not bool(torch.isfinite(torch.cat([p.detach().reshape(-1) for p in model.parameters()])).all())  # one op
    if nonfinite:
        restore_state(model=model, optimizer=optimizer, snapshot=snapshot, context=context, req=req)
    new_version = req.policy_version + 1
    store: Store = state["store"]
    if state.get("obs_rms") is not None:  # fold this round's raw-observation moments into the statistics
        state["obs_rms"] = merge(into=state["obs_rms"], other=pop_moments(arrays=dict(request.arrays)))
    publish_version(store=store, state=state, req=req, model=model, optimizer=optimizer,
                    writer=context.invocation_id)
    extras = probe_after_update(algo=algo, model=model, batch=batch, probe=req.probe, seed=req.seed,
                                policy_version=req.policy_version)
    return LearnerResult(policy_version=new_version, stats=stats_dict, nonfinite=nonfinite, extras=extras,
                         transfer_s=transfer_s, learning_s=time.perf_counter() - started - transfer_s,
                         compute_s=compute_s, device=str(state["device"]),
                         rows=int(len(request.arrays["indices"]))).wire_message()


_STEP_FAULT_HOOKED: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()   # each hooked once


def _arm_step_fault(*, optimizer: torch.optim.Optimizer) -> None:
    """With ``learner.optimizer_step`` armed (runtime/faults.py), fire it inside ``optimizer.step()`` (P8 tests)."""
    if armed(name="learner.optimizer_step") is not None and optimizer not in _STEP_FAULT_HOOKED:
        optimizer.register_step_pre_hook(_fire_optimizer_step_fault)
        _STEP_FAULT_HOOKED.add(optimizer)


def _read_batch(*, context: FunctionContext, req: LearnerRequest, indices: np.ndarray,
                device: torch.device) -> dict[str, torch.Tensor]:
    if req.batch_key is not None:  # shipped through the Store by the driver
        rows = context.cache["store"].get(key=req.batch_key).arrays
        return {key: torch.as_tensor(np.array(value), device=device) for key, value in rows.items()}
    buffers: dict[str, Buffer] = context.cache["buffers"]
    name = req.buffer["header"]  # the header segment name identifies the buffer
    if name not in buffers:
        buffers[name] = Buffer.attach(descriptor=req.buffer)
    rows = buffers[name].read(indices=indices)
    return {key: torch.as_tensor(np.ascontiguousarray(value), device=device) for key, value in rows.items()}


def _fire_optimizer_step_fault(*_: object) -> None:
    """A step pre-hook must return None (torch refuses anything else): fault_point's bool is dropped."""
    fault_point(name="learner.optimizer_step")
