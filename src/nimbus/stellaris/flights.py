"""A learner task in flight in the ``stellaris`` workflow (``InFlight``) and the requests the workflow builds
for its functions: a gradient learner's (stellaris/learner.py), the model fields the parameter function reuses from
it (stellaris/parameter.py), and what the parameter function needs to recompute a member aggregated with learners of
other versions (Eq. 2's peers, stellaris/recompute.py). Pure functions of the config and the flights.

Example::

    request = gradient_request(config=config, policy="main", version=3, batch_key="batch/main/r0/s0",
                               grad_key="grad/main/0", progress=0.1)
    flight = InFlight(slot=0, batch=batch, read_version=3, grad_key="grad/main/0", data_key="batch/main/r0/s0",
                      positions=piece.positions, progress=0.1)
    recompute_fields(cfg=config.stellaris, flight=flight, together=[flight, other])   # None: nothing to recompute
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nimbus.config import NimbusConfig
from nimbus.stellaris.config import StellarisConfig, TruncationForm
from nimbus.stellaris.learner import GradientRequest
from nimbus.stellaris.round_stats import Batch
from nimbus.stellaris.rule_base import Arrival


@dataclass(frozen=True)
class InFlight:
    """One learner function's task, from its launch until the rule applied or refused its gradient."""

    slot: int
    batch: Batch
    read_version: int
    grad_key: str
    data_key: str                  # its slice's Store key: all it reads of the batch
    positions: np.ndarray          # its task (the parameter function recomputes it with its co-members' truncation)
    progress: float                # the schedules' fraction at launch

    def arrival(self) -> Arrival:
        """What the aggregation rule sees of it."""
        return Arrival(key=self.grad_key, slot=self.slot, read_version=self.read_version)


def gradient_request(*, config: NimbusConfig, policy: str, version: int, batch_key: str, grad_key: str,
                     progress: float, peer_versions: Sequence[int] = (), truncation: TruncationForm = "none",
                     rho: float = 1.0, slowdown: float = 1.0) -> GradientRequest:
    """A learner's request; the parameter function reuses its env, algo and device fields for its model."""
    return GradientRequest(env_id=config.env.id, env_kwargs=dict(config.env.kwargs),
                           algo=config.algo.model_dump(mode="json"), policy=policy, policy_version=version,
                           batch_key=batch_key, grad_key=grad_key, peer_versions=peer_versions,
                           truncation=truncation, rho=rho, progress=progress, device=config.learner.device,
                           torch_threads=config.learner.torch_threads, env_imports=list(config.env.imports),
                           env_wrappers=list(config.env.wrappers), slowdown=slowdown)


def model_fields(*, config: NimbusConfig, policy: str, version: int) -> dict[str, Any]:
    """The parameter function's model fields: a learner request's env, algo, policy and device."""
    return dict(vars(gradient_request(config=config, policy=policy, version=version, batch_key="", grad_key="",
                                      progress=0.0)))


def recompute_fields(*, cfg: StellarisConfig, flight: InFlight, together: list[InFlight]) -> dict[str, Any] | None:
    """Eq. 2 truncates a gradient by the policies of the learners aggregated with it: their versions other than its
    own (a learner of the same version has its ratio). None when there are none (its learner computed it so, with ρ
    alone) or the truncation is off; else what the parameter function needs to recompute it."""
    truncation = cfg.truncation_form()
    peers = sorted({f.read_version for f in together} - {flight.read_version})
    if not peers or truncation == "none":
        return None
    return {"batch_key": flight.data_key, "read_version": flight.read_version, "peer_versions": peers,
            "truncation": truncation, "rho": cfg.rho, "progress": flight.progress}
