"""The driver's side of the resident parameter function (stellaris/resident.py): the anchor and the replay log.

The anchor is the newest version whose full state (weights and optimizer state) is in the Store; the log holds,
for each version from the anchor on, the aggregation that produced the next one (its gradient keys as applied,
scales, separate_steps, progress). Every parameter request carries the log, so any worker can rebuild the state
it steps from. The log's gradients stay in the Store until the anchor moves past them; the anchor moves when a
parameter call publishes the full state (asked every ``FULL_STATE_EVERY`` aggregations) or a checkpoint
exports it while no parameter call is in flight (one in flight still reads the old anchor and log if retried).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from nimbus.data.codec import Message
from nimbus.data.store import Store
from nimbus.models.weights import optim_key
from nimbus.stellaris.parameter import ParameterRequest
from nimbus.stellaris.resident import FULL_STATE_EVERY, has_key, recomputed_key


@dataclass
class ResidentLog:
    run_key: str
    anchor: int                                       # newest version with its full state in the Store
    entries: list[dict[str, Any]] = field(default_factory=list)   # entry i produced version anchor + i + 1

    def request_fields(self, *, version: int) -> dict[str, Any]:
        """The resident fields of a parameter request stepping from ``version`` (the newest published)."""
        assert version == self.anchor + len(self.entries), (version, self.anchor, len(self.entries))
        return {"resident": True, "run_key": self.run_key, "replay": [dict(e) for e in self.entries],
                "publish_state": len(self.entries) + 1 >= FULL_STATE_EVERY, "has_optimizer_state": self.anchor > 0}

    def done_with(self, *, request: ParameterRequest, published: bool) -> list[str]:
        """The gradient keys the Store may drop once the parameter call of ``request`` returned: all of them (and
        the members it recomputed) when it published nothing, else those the log does not keep."""
        if not published:
            return list(request.keys) + [recomputed_key(key=k) for k, r in zip(request.keys, request.recompute)
                                         if r is not None]
        return self.published(keys=request.keys, recompute=request.recompute, scales=request.scales,
                              separate_steps=request.separate_steps, progress=request.progress,
                              full_state=request.publish_state)

    def export(self, *, version: int, model: dict[str, Any], store: Store, invoke: Callable[[Message], Future],
               parameter_busy: bool) -> list[str]:
        """Before a checkpoint of ``version``: have the parameter function put its optimizer state (waits for it);
        the anchor moves there unless a parameter call is in flight. The gradient keys the Store may drop."""
        policy = model["policy"]
        if version == 0 or has_key(store=store, key=optim_key(policy=policy, version=version)):
            return []   # version 0 has none; a full-state aggregation or an earlier export put it
        request = ParameterRequest(model=model, policy_version=version, keys=[], scales=[], separate_steps=False,
                                   progress=0.0, export=True, **self.request_fields(version=version))
        invoke(request.to_message()).result()
        return [] if parameter_busy else self.move_anchor(version=version)

    def published(self, *, keys: Sequence[str], recompute: Sequence[Any], scales: Sequence[float],
                  separate_steps: bool, progress: float, full_state: bool) -> list[str]:
        """Record the aggregation that produced the next version; the gradient keys the Store may drop now."""
        applied = [recomputed_key(key=k) if i < len(recompute) and recompute[i] is not None else k
                   for i, k in enumerate(keys)]
        self.entries.append({"keys": applied, "scales": list(scales), "separate_steps": separate_steps,
                             "progress": progress})
        if not full_state:
            return [k for k in keys if k not in applied]   # a recomputed member's learner gradient is not replayed
        return self.move_anchor(version=self.anchor + len(self.entries)) + list(keys)

    def move_anchor(self, *, version: int) -> list[str]:
        """The full state of ``version`` is in the Store: the log before it is dropped; its keys returned."""
        dropped = self.entries[:version - self.anchor]
        self.entries = self.entries[version - self.anchor:]
        self.anchor = version
        return [key for entry in dropped for key in entry["keys"]]
