"""Model and optimizer state as codec Messages (safetensors frames), never pickles.

A policy version is two Store values, ``weights/<policy>/<v>`` and ``optim/<policy>/<v>``; every learner reads
and writes them through ``load_version`` and ``version_items``.

Example::

    store.put(key=weights_key(policy="main", version=3), message=model_to_message(model=m, version=3))
    load_model(model=m, message=store.get(key=weights_key(policy="main", version=3)))
    put_all(store=store, items=version_items(policy="main", version=4, model=m, optimizer=opt), writer="w")
    load_version(store=store, policy="main", version=4, model=m, optimizer=opt)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nimbus.data.codec import Message
from nimbus.data.store import KeyNotFound, Store


def weights_key(*, policy: str, version: int) -> str:
    return f"weights/{policy}/{version}"


def optim_key(*, policy: str, version: int) -> str:
    return f"optim/{policy}/{version}"


@dataclass(frozen=True)
class LoadedVersion:
    """What ``load_version`` read besides the tensors it copied."""

    header: dict[str, Any]          # the weights message's: ``policy_version``, a value learner's ``grad_steps``
    extras: dict[str, np.ndarray]   # the weights message's extra arrays (e.g. obs-normaliser state)


def load_version(*, store: Store, policy: str, version: int, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer | None = None,
                 optimizer_may_be_missing: bool = False) -> LoadedVersion:
    """``policy``'s ``version`` from ``store`` into ``model`` and, when given, ``optimizer``. Without
    ``optimizer_may_be_missing`` a missing optimizer state raises ``KeyNotFound`` (the caller said there is one);
    with it the optimizer stays fresh (version 0, or a policy just split off or copied by sharing)."""
    message = store.get(key=weights_key(policy=policy, version=version))
    loaded = LoadedVersion(header=message.header, extras=load_model(model=model, message=message))
    if optimizer is None:
        return loaded
    try:
        optim = store.get(key=optim_key(policy=policy, version=version))
    except KeyNotFound:
        if optimizer_may_be_missing:
            return loaded
        raise
    load_optimizer(optimizer=optimizer, message=optim)
    return loaded


def version_items(*, policy: str, version: int, model: torch.nn.Module | None,
                  optimizer: torch.optim.Optimizer | None, extra: dict[str, np.ndarray] | None = None,
                  weights_header: Mapping[str, Any] | None = None) -> dict[str, Message]:
    """The Store items of ``policy``'s ``version``, for one ``put_all``: the weights (with ``extra`` arrays and
    ``weights_header``'s fields after ``policy_version``) and the optimizer state. ``model`` or ``optimizer`` None
    leaves that item out: Stellaris's resident parameter function publishes the optimizer state only now and then."""
    items: dict[str, Message] = {}
    if model is not None:
        weights = model_to_message(model=model, version=version, extra=extra)
        weights.header.update(weights_header or {})
        items[weights_key(policy=policy, version=version)] = weights
    if optimizer is not None:
        items[optim_key(policy=policy, version=version)] = optimizer_to_message(optimizer=optimizer, version=version)
    return items


def model_to_message(*, model: torch.nn.Module, version: int, extra: dict[str, np.ndarray] | None = None) -> Message:
    arrays = {f"param.{name}": tensor.detach().cpu().numpy() for name, tensor in model.state_dict().items()}
    arrays.update({f"extra.{k}": v for k, v in (extra or {}).items()})
    return Message(header={"policy_version": version}, arrays=arrays)


def load_model(*, model: torch.nn.Module, message: Message) -> dict[str, np.ndarray]:
    """Copy weights into ``model``; returns the message's extra arrays (e.g. obs-normaliser state)."""
    params = {name[len("param."):]: a for name, a in message.arrays.items() if name.startswith("param.")}
    if not _copy_into(model=model, params=params):
        model.load_state_dict({name: torch.from_numpy(np.array(a)) for name, a in params.items()}, strict=True)
    return {name[len("extra."):]: a for name, a in message.arrays.items() if name.startswith("extra.")}


def _copy_into(*, model: torch.nn.Module, params: dict[str, np.ndarray]) -> bool:
    """The actors' per-round fast path (about half the cost of load_state_dict): copy straight into a CPU model's
    tensors when names, shapes and dtypes all match. Otherwise False, the model untouched, and
    load_state_dict does the work (and raises its usual errors)."""
    targets = model.state_dict()
    if targets.keys() != params.keys():
        return False
    pairs = []
    for name, tensor in targets.items():
        array = params[name]
        if tensor.device.type != "cpu" or tensor.requires_grad or tuple(tensor.shape) != array.shape \
                or tensor.dtype not in _NUMPY_DTYPES or np.dtype(_NUMPY_DTYPES[tensor.dtype]) != array.dtype:
            return False
        pairs.append((tensor.numpy(), array))
    for target, array in pairs:
        np.copyto(target, array)
    return True


_NUMPY_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.int64: "int64",
                 torch.int32: "int32", torch.uint8: "uint8", torch.bool: "bool"}


def optimizer_to_message(*, optimizer: torch.optim.Optimizer, version: int) -> Message:
    state = optimizer.state_dict()
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_id, param_state in state["state"].items():
        for name, value in param_state.items():
            if torch.is_tensor(value) and value.dim() > 0:
                arrays[f"state.{param_id}.{name}"] = value.detach().cpu().numpy()
            else:
                scalars.setdefault(str(param_id), {})[name] = float(value)
    return Message(header={"policy_version": version, "param_groups": state["param_groups"], "scalars": scalars},
                   arrays=arrays)


# How an optimizer steps, chosen for the device its worker runs on (fused on CUDA and the CPU, foreach elsewhere):
# never the saver's
IMPLEMENTATION_FLAGS = ("fused", "foreach", "capturable")


def load_optimizer(*, optimizer: torch.optim.Optimizer, message: Message) -> None:
    """The saved state into ``optimizer``, which keeps its own implementation flags: torch's ``load_state_dict``
    would take the saver's with the groups, so a state saved by a CPU worker would turn a GPU worker's fused Adam
    foreach (and the non-finite guard's skip, which the fused kernel does, would be lost). Given the loader's flags,
    torch also puts the step count where the loader's implementation keeps it (on the device when fused)."""
    state: dict[int, dict[str, Any]] = {}
    for key, array in message.arrays.items():
        _, param_id, name = key.split(".", 2)
        state.setdefault(int(param_id), {})[name] = torch.from_numpy(np.array(array))
    for param_id, values in message.header.get("scalars", {}).items():
        for name, value in values.items():
            state.setdefault(int(param_id), {})[name] = torch.tensor(value)
    optimizer.load_state_dict({"state": state, "param_groups": _with_own_flags(
        saved=message.header["param_groups"], own=optimizer.param_groups)})


def _with_own_flags(*, saved: list[dict[str, Any]], own: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``saved``'s groups with ``own``'s implementation flags (a flag ``own`` lacks dropped, not taken), in the saved
    key order: the loaded groups are saved again, and a checkpoint must not change its bytes by being reloaded."""
    if len(saved) != len(own):
        return saved  # load_state_dict refuses it with its own message
    return [_own_flags(group=group, mine=mine) for group, mine in zip(saved, own)]


def _own_flags(*, group: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
    kept = {key: mine[key] if key in IMPLEMENTATION_FLAGS else value for key, value in group.items()
            if key not in IMPLEMENTATION_FLAGS or key in mine}
    return {**kept, **{flag: mine[flag] for flag in IMPLEMENTATION_FLAGS if flag in mine and flag not in kept}}
