"""Model and optimizer state as codec Messages (safetensors frames), never pickles.

Example::

    store.put(key=weights_key(policy="main", version=3), message=model_to_message(model=m, version=3))
    load_model(model=m, message=store.get(key=weights_key(policy="main", version=3)))
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from nimbus.data.codec import Message


def weights_key(*, policy: str, version: int) -> str:
    return f"weights/{policy}/{version}"


def optim_key(*, policy: str, version: int) -> str:
    return f"optim/{policy}/{version}"


def model_to_message(*, model: torch.nn.Module, version: int, extra: dict[str, np.ndarray] | None = None) -> Message:
    arrays = {f"param.{name}": tensor.detach().cpu().numpy() for name, tensor in model.state_dict().items()}
    arrays.update({f"extra.{k}": v for k, v in (extra or {}).items()})
    return Message(header={"policy_version": version}, arrays=arrays)


def load_model(*, model: torch.nn.Module, message: Message) -> dict[str, np.ndarray]:
    """Copy weights into ``model``; returns the message's extra arrays (e.g. obs-normaliser state)."""
    state = {name[len("param."):]: torch.from_numpy(np.array(a)) for name, a in message.arrays.items()
             if name.startswith("param.")}
    model.load_state_dict(state, strict=True)
    return {name[len("extra."):]: a for name, a in message.arrays.items() if name.startswith("extra.")}


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


def load_optimizer(*, optimizer: torch.optim.Optimizer, message: Message) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, array in message.arrays.items():
        _, param_id, name = key.split(".", 2)
        state.setdefault(int(param_id), {})[name] = torch.from_numpy(np.array(array))
    for param_id, values in message.header.get("scalars", {}).items():
        for name, value in values.items():
            state.setdefault(int(param_id), {})[name] = torch.tensor(value)
    optimizer.load_state_dict({"state": state, "param_groups": message.header["param_groups"]})
