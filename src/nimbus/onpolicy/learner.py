"""The learner function: read a batch from the shared buffer, update the policy, publish v+1.

It runs inside a runtime worker. The authoritative learner state lives in the Store
(``weights/<policy>/<v>`` and ``optim/<policy>/<v>``), so any worker can run any update; a warm worker
whose cached model already holds version v skips the reload (that is the warm start). The batch is
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
from dataclasses import asdict, dataclass
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
from nimbus.data.buffer import Buffer
from nimbus.data.codec import Message
from nimbus.data.store import Store
from nimbus.data.stores import function_store, put_all
from nimbus.envs.make import make_env
from nimbus.envs.obsnorm import merge, pop_moments, rms_from_extras, rms_to_extras
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import (load_model, load_optimizer, model_to_message, optim_key, optimizer_to_message,
                                  weights_key)
from nimbus.nitro.probe import ProbeRequest, probe_policy
from nimbus.onpolicy.actor import derive_seed
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.devices import place, torch_device
from nimbus.runtime.faults import armed, fault_point


@dataclass(frozen=True)
class LearnerRequest:
    env_id: str
    env_kwargs: dict[str, Any]
    algo: dict[str, Any]
    policy: str
    policy_version: int        # the version the update reads; it publishes policy_version + 1
    has_optimizer_state: bool
    buffer: dict[str, Any]     # Buffer.descriptor()
    progress: float            # 0..1 through the run, for linear schedules
    seed: int
    device: str
    torch_threads: int
    probe: dict[str, Any] | None = None  # nitro/probe.py ProbeRequest: Hessian probe after the update (Nitro)
    batch_key: str | None = None  # the batch is this Store key (ray: the buffer may be on another node), not rows
    env_imports: Sequence[str] = ()    # env.imports: modules that register the user's env ids
    env_wrappers: Sequence[str] = ()   # env.wrappers: gymnasium wrappers, applied in order

    def to_message(self, *, indices: np.ndarray, obs_moments: dict[str, np.ndarray] | None = None) -> Message:
        """``obs_moments``: the round's raw-observation moments (``algo.normalize_obs``), see envs/obsnorm.py."""
        # a shallow dict (not asdict's deep copy, ~0.1 ms): the header is serialised before it leaves the process
        return Message(header={"learner": dict(vars(self)), "_affinity": f"learner-{self.policy}"},
                       arrays={"indices": indices.astype(np.int64), **(obs_moments or {})})

    @classmethod
    def from_message(cls, message: Message) -> "LearnerRequest":
        return cls(**message.header["learner"])


def init_worker() -> None:
    """Run once when a learner worker starts (runtime/worker.py): the first use of a torch.optim optimizer
    imports torch._dynamo (~1 s), which would otherwise sit on round 0's critical path."""
    import torch._dynamo  # noqa: F401


def resolve_device(*, requested: str, leased: str | None = None) -> torch.device:
    """The device the update runs on: the device pool's lease (``FunctionContext.device``) when there is one,
    else ``learner.device`` (runtime/devices.py ``torch_device``)."""
    return torch_device(leased=leased, requested=requested)


def learner_function(*, context: FunctionContext, request: Message) -> Message:
    if "pipeline" in request.header:  # ARTOS pipelines: rows are streamed as actors land (onpolicy/pipeline_learner.py)
        from nimbus.onpolicy.pipeline_learner import pipelined_learner_function
        return pipelined_learner_function(context=context, request=request)
    req = LearnerRequest.from_message(request)
    started = time.perf_counter()
    state = _learner_state(context=context, req=req, store=function_store(header=request.header))
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
        _restore(model=model, optimizer=optimizer, snapshot=snapshot, context=context, req=req)
    new_version = req.policy_version + 1
    store: Store = state["store"]
    if state.get("obs_rms") is not None:  # fold this round's raw-observation moments into the statistics
        state["obs_rms"] = merge(into=state["obs_rms"], other=pop_moments(arrays=dict(request.arrays)))
    publish_version(store=store, state=state, req=req, model=model, optimizer=optimizer,
                    writer=context.invocation_id)
    extras = _probe(algo=algo, model=model, batch=batch, req=req)
    header = {"policy_version": new_version, "stats": stats_dict, "nonfinite": nonfinite, "extras": extras,
              "transfer_s": transfer_s, "learning_s": time.perf_counter() - started - transfer_s,
              "compute_s": compute_s, "device": str(state["device"]),
              "rows": int(len(request.arrays["indices"]))}
    return Message(header=header)


def _arm_step_fault(*, optimizer: torch.optim.Optimizer) -> None:
    """With ``learner.optimizer_step`` armed (runtime/faults.py), fire it inside ``optimizer.step()`` (P8 tests)."""
    if armed(name="learner.optimizer_step") is not None and not getattr(optimizer, "_nimbus_fault_hook", False):
        optimizer.register_step_pre_hook(lambda *_: fault_point(name="learner.optimizer_step"))
        optimizer._nimbus_fault_hook = True  # type: ignore[attr-defined]


def _probe(*, algo: Any, model: torch.nn.Module, batch: dict[str, torch.Tensor],
           req: LearnerRequest) -> dict[str, float]:
    """Nitro's Hessian probe of the updated policy (nitro/probe.py), or {} when the request has none."""
    request = ProbeRequest.from_header(req.probe)
    if request is None:
        return {}
    return probe_policy(algo=algo, model=model, batch=batch, request=request,
                        seed=derive_seed(req.seed, req.policy_version, 3))


def _learner_state(*, context: FunctionContext, req: LearnerRequest, store: Store) -> dict[str, Any]:
    cache = context.cache
    if cache.get("algo_config") != req.algo or cache.get("env_id") != (req.env_id, list(req.env_wrappers)):
        torch.set_num_threads(req.torch_threads)
        config = ALGO_CONFIGS[req.algo["name"]].model_validate(req.algo)
        probe = make_env(env_id=req.env_id, seed=0, kwargs=req.env_kwargs, imports=req.env_imports,
                         wrappers=req.env_wrappers)
        spaces = EnvSpaces(observation=probe.observation_space, action=probe.action_space)
        probe.close()
        algo = make_algorithm(config=config)
        model = algo.make_model(spaces=spaces)
        cache.clear()
        cache.update(algo_config=req.algo, env_id=(req.env_id, list(req.env_wrappers)), algo=algo, model=model,
                     spaces=spaces, optimizer=algo.make_optimizer(model=model), version=None, store=store, buffers={})
    cache["device"] = resolve_device(requested=req.device, leased=context.device)
    place(cache=cache, device=cache["device"])  # a warm model left the device at its last lease's end
    if cache["version"] != (req.policy, req.policy_version):  # several policies share learner workers
        store: Store = cache["store"]
        extras = load_model(model=cache["model"], message=store.get(key=weights_key(policy=req.policy,
                                                                                     version=req.policy_version)))
        cache["obs_rms"] = rms_from_extras(extras=extras, shape=cache["spaces"].observation.shape) \
            if req.algo.get("normalize_obs") else None
        cache["optimizer"] = cache["algo"].make_optimizer(model=cache["model"])
        if req.has_optimizer_state:
            load_optimizer(optimizer=cache["optimizer"],
                           message=store.get(key=optim_key(policy=req.policy, version=req.policy_version)))
        cache["version"] = (req.policy, req.policy_version)
    return cache


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


def _restore(*, model: torch.nn.Module, optimizer: torch.optim.Optimizer, snapshot: list[torch.Tensor],
             context: FunctionContext, req: LearnerRequest) -> None:
    """Undo a step that produced non-finite values: weights and optimizer state back to version v."""
    with torch.no_grad():
        for param, saved in zip(model.parameters(), snapshot):
            param.copy_(saved)
    if req.has_optimizer_state:
        store: Store = context.cache["store"]
        load_optimizer(optimizer=optimizer,
                       message=store.get(key=optim_key(policy=req.policy, version=req.policy_version)))
    else:
        optimizer.state.clear()


def publish_version(*, store: Store, state: dict[str, Any], req: LearnerRequest, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, writer: str) -> None:
    """Put weights and optimizer state of version ``req.policy_version + 1`` (with the observation statistics)
    in one round trip where the backend batches, tagged with ``writer`` (the invocation id: a retry of this
    invocation may redo the puts, data/store.py), and remember the version in the warm cache."""
    new_version = req.policy_version + 1
    put_all(store=store, items={
        weights_key(policy=req.policy, version=new_version): model_to_message(
            model=_cpu(model), version=new_version, extra=rms_to_extras(rms=state.get("obs_rms"))),
        optim_key(policy=req.policy, version=new_version): optimizer_to_message(optimizer=optimizer,
                                                                                version=new_version)},
            writer=writer)
    state["version"] = (req.policy, new_version)
    fault_point(name="learner.published")


def _cpu(model: torch.nn.Module) -> torch.nn.Module:
    return model if next(model.parameters()).device.type == "cpu" else _CpuView(model)


class _CpuView(torch.nn.Module):
    """state_dict() of a CUDA model, moved to CPU for serialisation."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self._model = model

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return {k: v.detach().cpu() for k, v in self._model.state_dict().items()}
