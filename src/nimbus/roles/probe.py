"""The ``probe`` block of a learner request: what the driver asks a learner function to measure after its update.

It is plain data on the wire (``LearnerRequest.probe``, roles/learner.py, carries its header), derived from the
actor-scaling config: Nitro's scaler reads the Hessian signal (``actors.scaling.kind: nitro``), the other scalers read
none. The data and that rule live here, beside the learner request, rather than in nitro/: every policy's System
carries the request (policy/system.py), and the per-policy layer sits below the technique folders, so it must not
import Nitro. What a learner does with the block, the probe itself, is Nitro's (nitro/probe.py); so are the configs
read here (nitro/config.py, part of the config layer).

Example::

    probe = probe_request(scaling=config.actors.scaling)   # None unless the scaler reads the Hessian
    header = probe.to_header() if probe else None           # LearnerRequest(probe=header, ...)
    request = ProbeRequest.from_header(header)               # in the learner function
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from nimbus.nitro.config import NitroScalingConfig, ScalingConfig


@dataclass(frozen=True)
class ProbeRequest:
    """The ``probe`` block of a learner request (from ``NitroScalingConfig.hessian``)."""

    subset_size: int | None   # None: the whole batch
    max_iterations: int
    tolerance: float
    signal: str = "paper"     # "authors_code": the authors' signal instead (nitro/probe_authors.py)

    def to_header(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_header(cls, header: dict[str, Any] | None) -> ProbeRequest | None:
        return None if header is None else cls(**header)


def probe_request(*, scaling: ScalingConfig) -> ProbeRequest | None:
    """The probe the actor scaler needs each round, or None when it reads no Hessian signal (driver side)."""
    if isinstance(scaling, NitroScalingConfig):
        hessian = scaling.hessian
        return ProbeRequest(subset_size=hessian.subset_size, max_iterations=hessian.max_iterations,
                            tolerance=hessian.tolerance, signal=scaling.variant)
    return None
