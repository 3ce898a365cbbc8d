"""What every learner function shares (on-policy, pipelined, off-policy; Stellaris's parameter function publishes
through ``publish_version``): the request, the warm worker's learner state, undoing a non-finite step, and publishing
version v+1.

The authoritative learner state lives in the Store (``weights/<policy>/<v>`` and ``optim/<policy>/<v>``), so any worker
can run any update; a warm worker whose cached model already holds version v skips the reload (the warm start).

Example (what a learner function does)::

    state = learner_state(context=context, req=req, store=function_store(header=request.header))
    ...   # update state["model"] with state["optimizer"]; on a non-finite step: restore_state(...)
    publish_version(store=state["store"], state=state, req=req, model=model, optimizer=optimizer,
                    writer=context.invocation_id)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
from nimbus.data.codec import Message
from nimbus.data.request import WireRequest
from nimbus.data.result import WireResult
from nimbus.data.store import Store
from nimbus.data.stores import put_all
from nimbus.envs.obsnorm import rms_from_extras, rms_to_extras
from nimbus.models.weights import load_optimizer, load_version, optim_key, version_items
from nimbus.roles.actor import request_spaces
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.devices import place, torch_device
from nimbus.runtime.faults import fault_point


@dataclass(frozen=True)
class LearnerRequest(WireRequest, header="learner", affinity="learner-{policy}"):
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
    probe: dict[str, Any] | None = None  # roles/probe.py ProbeRequest: Hessian probe after the update (Nitro)
    batch_key: str | None = None  # the batch is this Store key (ray: the buffer may be on another node), not rows
    env_imports: Sequence[str] = ()    # env.imports: modules that register the user's env ids
    env_wrappers: Sequence[str] = ()   # env.wrappers: gymnasium wrappers, applied in order
    compile: str = "off"               # learner.compile: PPO's minibatch loss compiled (algos/compiled.py)

    def to_message(self, *, indices: np.ndarray, obs_moments: dict[str, np.ndarray] | None = None) -> Message:
        """``obs_moments``: the round's raw-observation moments (``algo.normalize_obs``), see envs/obsnorm.py."""
        return self.wire_message(arrays={"indices": indices.astype(np.int64), **(obs_moments or {})})


@dataclass(frozen=True)
class LearnerResult(WireResult):
    """What a learner function returns: the new version, the update's statistics and timings (the off-policy
    learner adds ``stale_rows``; its TD errors and kept rows travel as arrays)."""

    policy_version: int             # the version the update published
    stats: dict[str, float]         # the loss terms and diagnostics (the metrics row's losses)
    nonfinite: bool                 # the update was non-finite: skipped, the weights kept (train.max_nonfinite_losses)
    extras: dict[str, float]        # Nitro's probe (nitro/probe.py), when the request asked for it
    transfer_s: float               # reading the batch
    learning_s: float               # the rest of the call
    compute_s: float                # the update's arithmetic
    device: str
    rows: int
    stale_rows: int = 0             # off-policy: rows dropped as too old for the learner's version


def resolve_device(*, requested: str, leased: str | None = None) -> torch.device:
    """The device the update runs on: the device pool's lease (``FunctionContext.device``) when there is one,
    else ``learner.device`` (runtime/devices.py ``torch_device``)."""
    return torch_device(leased=leased, requested=requested)


def learner_state(*, context: FunctionContext, req: LearnerRequest, store: Store) -> dict[str, Any]:
    """The warm worker's learner state (``context.cache``: algo, model, optimizer, device, obs_rms, buffers) holding
    ``req.policy`` at ``req.policy_version``: rebuilt when the algorithm or env changes, reloaded from the Store
    (weights and, with ``has_optimizer_state``, the optimizer) when it holds another version; placed on the device."""
    cache = context.cache
    # every invocation, not only when the state is built: the runtime clamps it to the function's cpus
    torch.set_num_threads(req.torch_threads)
    built_for = (req.algo, req.compile, (req.env_id, list(req.env_wrappers)))
    if (cache.get("algo_config"), cache.get("compile"), cache.get("env_id")) != built_for:
        config = ALGO_CONFIGS[req.algo["name"]].model_validate(req.algo)
        spaces = request_spaces(req=req)
        algo = make_algorithm(config=config, compile_mode=req.compile)
        model = algo.make_model(spaces=spaces)
        cache.clear()
        cache.update(algo_config=req.algo, compile=req.compile, env_id=(req.env_id, list(req.env_wrappers)), algo=algo,
                     model=model, spaces=spaces, optimizer=algo.make_optimizer(model=model), version=None, store=store,
                     buffers={})
    cache["device"] = resolve_device(requested=req.device, leased=context.device)
    place(cache=cache, device=cache["device"])  # a warm model left the device at its last lease's end
    if cache["version"] != (req.policy, req.policy_version):  # several policies share learner workers
        cache["optimizer"] = cache["algo"].make_optimizer(model=cache["model"])
        loaded = load_version(store=cache["store"], policy=req.policy, version=req.policy_version,
                              model=cache["model"], optimizer=cache["optimizer"] if req.has_optimizer_state else None)
        cache["obs_rms"] = rms_from_extras(extras=loaded.extras, shape=cache["spaces"].observation.shape) \
            if req.algo.get("normalize_obs") else None
        cache["version"] = (req.policy, req.policy_version)
    return cache


def restore_state(*, model: torch.nn.Module, optimizer: torch.optim.Optimizer, snapshot: list[torch.Tensor],
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
    put_all(store=store, writer=writer, items=version_items(
        policy=req.policy, version=new_version, model=cpu_copy(model=model), optimizer=optimizer,
        extra=rms_to_extras(rms=state.get("obs_rms"))))
    state["version"] = (req.policy, new_version)
    fault_point(name="learner.published")


def cpu_copy(*, model: torch.nn.Module) -> torch.nn.Module:
    """The model itself on the CPU, else a view whose ``state_dict()`` is on the CPU (for serialisation)."""
    return model if next(model.parameters()).device.type == "cpu" else _CpuView(model)


class _CpuView(torch.nn.Module):
    """state_dict() of a CUDA model, moved to CPU for serialisation."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self._model = model

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return {k: v.detach().cpu() for k, v in self._model.state_dict().items()}
