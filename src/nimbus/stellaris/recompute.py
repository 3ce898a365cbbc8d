"""The parameter function's recompute of a member aggregated with other versions (Eq. 2's peers), from what its
warm worker keeps between calls.

A member whose aggregation holds versions other than its own is recomputed at its read version on its slice,
truncated by those versions (stellaris/parameter.py). Each recompute needs the member's model, its slice's rows and
log π_v(a|s) of every peer version v on that slice. Loading them from the Store per member (a model's weights
decoded and copied in, the slice decoded, a forward pass per peer) was most of the parameter function's time, so
the worker keeps, in ``context.cache`` under ``RECOMPUTE``:

* the tensors of the newest ``MODELS_KEPT`` versions: the parameter function published them, so it keeps a copy of
  each as it publishes, and builds a model from one only when a recompute reads it (a cold worker loads a missing
  version from the Store once);
* the newest ``SLICES_KEPT`` slices' rows by key;
* log π_v(a|s) per (version, slice, task), so a peer version's forward pass on a slice runs once, however many
  members of that slice it truncates.

The values are those the Store holds (the weights are put from the same model; a slice is immutable), so a
recompute from the caches equals one from the Store bit for bit.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from nimbus.models.weights import load_model, weights_key
from nimbus.stellaris.gradients import gradient_algo_for

RECOMPUTE = "param_recompute"
MODELS_KEPT = 16    # versions: more than a queue's spread of read versions in the shipped and paper-scale configs
SLICES_KEPT = 32    # slices: 2 rounds of the paper-scale config's 16 (an Atari slice of 128 frames is ~3.6 MB)
LOG_PROBS_KEPT = 128


class _Recent(OrderedDict):
    """A mapping that forgets its oldest entries beyond ``limit``."""

    def __init__(self, *, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def keep(self, key: Any, value: Any) -> Any:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)
        return value


@dataclass
class RecomputeCache:
    states: _Recent = field(default_factory=lambda: _Recent(limit=MODELS_KEPT))   # version → its tensors (copies)
    models: _Recent = field(default_factory=lambda: _Recent(limit=MODELS_KEPT // 2))   # built when a recompute reads
    rows: _Recent = field(default_factory=lambda: _Recent(limit=SLICES_KEPT))
    log_probs: _Recent = field(default_factory=lambda: _Recent(limit=LOG_PROBS_KEPT))


def recompute_cache(*, state: dict[str, Any], run_key: str) -> RecomputeCache:
    """The worker's cache for this run (a worker warm from another run starts empty)."""
    held = state.get(RECOMPUTE)
    if held is None or held[0] != run_key:
        held = (run_key, RecomputeCache())
        state[RECOMPUTE] = held
    return held[1]


def remember_version(*, state: dict[str, Any], run_key: str, policy: str, version: int,
                     model: torch.nn.Module) -> None:
    """Keep a copy of the tensors of the model the parameter function just published as ``version`` (a model is
    built from them only when a recompute reads that version: most versions are never read)."""
    cache = recompute_cache(state=state, run_key=run_key)
    cache.states.keep((policy, version), {name: t.detach().clone() for name, t in model.state_dict().items()})


@dataclass(frozen=True)
class CachedSources:
    """``learner.Sources`` from the parameter worker's caches, filled from the Store on a miss."""

    state: dict[str, Any]
    store: Any
    policy: str
    cache: RecomputeCache

    def model(self, *, version: int) -> torch.nn.Module:
        held = self.cache.models.get((self.policy, version))
        if held is None:   # the least recently used model object is loaded again (building one costs more)
            held = self.cache.models.popitem(last=False)[1] if len(self.cache.models) >= self.cache.models.limit \
                else self.state["algo"].make_model(spaces=self.state["spaces"]).to(self.state["device"])
            tensors = self.cache.states.get((self.policy, version))
            if tensors is not None:
                held.load_state_dict(tensors)
            else:   # a cold worker: the Store's copy
                load_model(model=held, message=self.store.get(key=weights_key(policy=self.policy, version=version)))
            self.cache.models.keep((self.policy, version), held)
        return held

    def rows(self, *, key: str) -> dict[str, torch.Tensor]:
        held = self.cache.rows.get(key)
        if held is None:
            message = self.store.get(key=key)
            rows = {name: torch.as_tensor(np.array(value), device=self.state["device"])
                    for name, value in message.arrays.items()}
            held = self.cache.rows.keep(key, rows if message.header.get("postprocessed")
                                        else self.state["algo"].postprocess(batch=rows))
        return held

    def peer_log_prob(self, *, version: int, index: int, key: str, positions: np.ndarray,
                      minibatch: dict[str, torch.Tensor]) -> torch.Tensor:
        entry = (self.policy, version, key, np.asarray(positions, np.int64).tobytes())
        held = self.cache.log_probs.get(entry)
        if held is None:
            with torch.no_grad():
                held = self.cache.log_probs.keep(entry, gradient_algo_for(name=self.state["algo"].config.name)
                                                 .log_prob(model=self.model(version=version), batch=minibatch))
        return held
