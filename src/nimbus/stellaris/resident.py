"""The resident parameter function's state (docs/stellaris.md, "The resident parameter function").

With ``stellaris.resident_parameter`` the parameter function keeps its model and optimizer in its warm worker
(``context.cache["param_resident"]``, keyed by the run, the policy and the version they hold) and publishes only
the weights of each new version. The full state (weights and optimizer state) of an **anchor** version is in
the Store: version 0 (no optimizer state yet), a resumed checkpoint's version, a version the workflow asked to
be published in full (``publish_state``: every ``FULL_STATE_EVERY`` aggregations) or exported for a checkpoint.
Every request carries the **replay log**: the aggregations that produced the versions from the anchor to the
one it steps from (their gradient keys, scales, separate_steps, progress); the workflow keeps those gradients
in the Store until the anchor moves past them. A worker that does not hold the requested version (a cold
worker, an evicted one, a retry elsewhere) rebuilds it: the anchor's full state, then the log replayed with the
same steps (stellaris/steps.py), so the rebuilt state equals the lost one bit for bit and nothing is applied
twice. A member the parameter function recomputed (truncation by its co-members) is put under
``recomputed_key`` so the replay reads it as applied, without recomputing.

The resident state is taken out of the cache while an aggregation runs and put back only after its version is
published: an attempt that fails half way leaves no resident state, and its retry rebuilds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nimbus.data.store import Store
from nimbus.data.stores import put_all
from nimbus.envs.obsnorm import rms_to_extras
from nimbus.models.weights import load_version, version_items
from nimbus.roles.learner import cpu_copy
from nimbus.stellaris.steps import apply_aggregation, stored_gradient, usable_gradients

RESIDENT = "param_resident"
FULL_STATE_EVERY = 50   # aggregations between two full states the workflow asks for (bounds the replay log)
Held = tuple[torch.nn.Module, torch.optim.Optimizer]


def recomputed_key(*, key: str) -> str:
    """Where the parameter function puts a member it recomputed, for a later replay."""
    return f"{key}/recomputed"


def take_resident(*, state: dict[str, Any], store: Store, run_key: str, policy: str, version: int,
                  replay: Sequence[dict[str, Any]], has_optimizer_state: bool) -> tuple[Held, bool]:
    """The model and optimizer at ``version``, taken out of the cache (the caller puts them back with
    ``keep_resident`` once the next version is published), and whether they had to be rebuilt."""
    held = state.pop(RESIDENT, None)
    if held is not None and held[0] == (run_key, policy, version):
        return held[1], False
    return rebuild(state=state, store=store, policy=policy, version=version, replay=replay,
                   has_optimizer_state=has_optimizer_state), True


def resident_at(*, state: dict[str, Any], store: Store, run_key: str, policy: str, version: int,
                replay: Sequence[dict[str, Any]], has_optimizer_state: bool) -> tuple[Held, bool]:
    """The model and optimizer at ``version`` without disturbing the resident state (an export for a checkpoint):
    the resident ones if they hold it, else a rebuilt copy."""
    held = state.get(RESIDENT)
    if held is not None and held[0] == (run_key, policy, version):
        return held[1], False
    return rebuild(state=state, store=store, policy=policy, version=version, replay=replay,
                   has_optimizer_state=has_optimizer_state), True


def keep_resident(*, state: dict[str, Any], run_key: str, policy: str, version: int, held: Held) -> None:
    state[RESIDENT] = ((run_key, policy, version), held)


def rebuild(*, state: dict[str, Any], store: Store, policy: str, version: int, replay: Sequence[dict[str, Any]],
            has_optimizer_state: bool) -> Held:
    """The anchor's full state (version − len(replay)), then each logged aggregation applied again."""
    anchor = version - len(replay)
    model = state["algo"].make_model(spaces=state["spaces"]).to(state["device"])
    optimizer = state["algo"].make_optimizer(model=model)
    load_version(store=store, policy=policy, version=anchor, model=model,
                 optimizer=optimizer if has_optimizer_state else None)
    if has_optimizer_state:
        _state_in_parameter_order(optimizer=optimizer)
    for entry in replay:
        keys = list(entry["keys"])
        fetched = [stored_gradient(store=store, key=key) for key in keys]
        gradients, _ = usable_gradients(fetched=fetched, model=model, keys=keys, scales=entry["scales"])
        if gradients:
            apply_aggregation(state=state, model=model, optimizer=optimizer, gradients=gradients,
                              separate_steps=bool(entry["separate_steps"]), progress=float(entry["progress"]))
    return model, optimizer


def has_key(*, store: Store, key: str) -> bool:
    """Whether ``key`` holds a committed value (``keys(prefix=)`` is path-wise: a key is not under itself)."""
    return key in store.keys(prefix=key.rsplit("/", 1)[0])


def publish(*, store: Store, state: dict[str, Any], policy: str, version: int, held: Held, weights: bool,
            optimizer: bool, writer: str) -> None:
    """Put the weights and/or the optimizer state of ``version`` (tagged with ``writer``: a retry redoes its puts)."""
    model, optim = held
    put_all(store=store, writer=writer, items=version_items(
        policy=policy, version=version, model=cpu_copy(model=model) if weights else None,
        optimizer=optim if optimizer else None, extra=rms_to_extras(rms=state.get("obs_rms"))))


def _state_in_parameter_order(*, optimizer: torch.optim.Optimizer) -> None:
    """A loaded optimizer holds its per-parameter state in the saved message's key order ("0", "1", "10", ...);
    one that stepped from the start holds it in parameter order. ``state_dict()`` follows that order, so a
    rebuilt state is put back in parameter order and an exported checkpoint is the same bytes either way."""
    ordered = {p: optimizer.state[p] for group in optimizer.param_groups for p in group["params"]
               if p in optimizer.state}
    optimizer.state.clear()
    optimizer.state.update(ordered)
