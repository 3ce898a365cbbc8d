"""The parameter function as the ``stellaris`` workflow calls it (Stellaris §IV): ``ParameterCalls``, a part
that stellaris/workflow.py's StellarisWorkflow holds, next to its learner slots and its aggregation rule.

It builds each call's request from an aggregation the rule decided (its members, the fields to recompute a member
aggregated with other versions, Eq. 2, and with ``stellaris.resident_parameter`` the resident log's anchor and
replay, stellaris/resident_log.py), says what a returned call leaves to delete, and keeps the policy versions the run
put in the Store: after each aggregation every stored version older than ``store.keep_versions`` that no reader needs
is deleted (a window below the floor would miss versions when the resident anchor moves, docs/stellaris.md).
Whether a call runs (one at a time) stays the workflow's: it decides when gradients are offered.

Example::

    parameter = ParameterCalls(system=system, progress=progress)
    request, message = parameter.request(aggregation=aggregation, flights=flights, progress=progress)
    future = parameter.invoke(message=message)
    done = ParameterResult.from_message(future.result())
    parameter.returned(request=request, done=done)                    # the members' gradients deleted
    parameter.published(version=done.policy_version, needed={3, 4})   # versions learners and actors still read
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from nimbus.data.codec import Message
from nimbus.data.store import Store
from nimbus.models.weights import optim_key, weights_key
from nimbus.policy.system import System
from nimbus.roles.specs import role_spec
from nimbus.stellaris.flights import InFlight, model_fields, recompute_fields
from nimbus.stellaris.parameter import ParameterRequest, ParameterResult
from nimbus.stellaris.resident_log import ResidentLog
from nimbus.stellaris.rules import Aggregation
from nimbus.types import Progress, schedule_fraction

PARAMETER_ENTRYPOINT = "nimbus.stellaris.parameter:parameter_function"


def delete_keys(*, store: Store, keys: Iterable[str]) -> None:
    """Delete ``keys`` from ``store`` (a key already gone is a no-op, core.Store.delete)."""
    for key in keys:
        store.delete(key=key)


class ParameterCalls:
    """The parameter function's requests and the policy versions its calls published."""

    def __init__(self, *, system: System, progress: Progress) -> None:
        self.system, self.policy, self.cfg = system, system.policy, system.config.stellaris
        self.spec = role_spec(config=system.config, role="parameter", entrypoint=PARAMETER_ENTRYPOINT)
        workload = system.actor_spec.workload   # a workload on a shared pool: its own warm workers and ledger rows
        if workload:
            self.spec = replace(self.spec, name=f"{workload}/parameter", workload=workload)
        self.run_key = uuid.uuid4().hex   # names this run's state in the parameter function's warm worker
        # the resident parameter function's anchor and replay log (stellaris/resident_log.py)
        self.resident = ResidentLog(run_key=self.run_key, anchor=progress.policy_version) \
            if self.cfg.resident_parameter else None
        self.stored_versions = {progress.policy_version}   # versions whose weights this run put in the Store

    def invoke(self, *, message: Message) -> Future:
        """One parameter function call on the system's runtime."""
        return self.system.runtime.invoke(spec=self.spec, request=message)

    def model_fields(self, *, version: int) -> dict[str, Any]:
        """The model the parameter function steps (a learner request's env, algo, policy and device fields)."""
        return model_fields(config=self.system.config, policy=self.policy, version=version)

    def request(self, *, aggregation: Aggregation, flights: list[InFlight],
                progress: Progress) -> tuple[ParameterRequest, Message]:
        """The call that applies ``aggregation`` (``flights``: its members' learners) to the newest version, and its
        message: each member recomputed with its co-members' truncation carries its task's positions."""
        cfg, version = self.system.config, progress.policy_version
        recompute = [recompute_fields(cfg=self.cfg, flight=f, together=flights) for f in flights]
        resident = self.resident.request_fields(version=version) if self.resident is not None else \
            {"has_optimizer_state": version > 0, "run_key": self.run_key}
        request = ParameterRequest(model=self.model_fields(version=version), policy_version=version,
                                   keys=[m.key for m in aggregation.members],
                                   scales=[m.scale for m in aggregation.members],
                                   separate_steps=aggregation.separate_steps,
                                   progress=schedule_fraction(progress=progress,
                                                              total_env_steps=cfg.train.total_env_steps),
                                   recompute=recompute, **resident)
        return request, request.to_message(
            positions=[f.positions if r is not None else None for f, r in zip(flights, recompute)])

    def returned(self, *, request: ParameterRequest, done: ParameterResult) -> None:
        """A call returned: the members' gradients are deleted (a resident log keeps those it may replay)."""
        delete_keys(store=self.system.store, keys=list(request.keys) if self.resident is None else
                    self.resident.done_with(request=request, published=done.published))

    def published(self, *, version: int, needed: set[int]) -> None:
        """A call published ``version``: delete every stored version older than ``store.keep_versions`` that no
        reader in ``needed`` (learners in flight, held or waiting gradients, the sampling round's actors: a retry
        re-reads its weights) still reads."""
        self.stored_versions.add(version)
        if self.resident is not None:   # the anchor's full state rebuilds a lost resident state
            needed = needed | {self.resident.anchor}
        newest_kept = version - self.system.config.store.keep_versions + 1
        # every stored version, not a window below the floor: the anchor pins the floor for many aggregations, and
        # when it moves the floor jumps past versions that a fixed window would never reach again
        for old in sorted(v for v in self.stored_versions if v < newest_kept and v not in needed):
            delete_keys(store=self.system.store, keys=[weights_key(policy=self.policy, version=old),
                                                       optim_key(policy=self.policy, version=old)])
            self.stored_versions.discard(old)
