"""The probe block of a learner request: derived from the scaling config, carried as a header."""

from __future__ import annotations

from nimbus.nitro.config import FixedScalingConfig, HessianProbeConfig, NitroScalingConfig
from nimbus.roles.probe import ProbeRequest, probe_request


def test_probe_request_only_for_nitro() -> None:
    nitro = NitroScalingConfig(hessian=HessianProbeConfig(subset_size=128, max_iterations=20, tolerance=1e-2))
    assert probe_request(scaling=nitro) == ProbeRequest(subset_size=128, max_iterations=20, tolerance=1e-2)
    assert probe_request(scaling=FixedScalingConfig(num_actors=2)) is None
    request = probe_request(scaling=nitro)
    assert ProbeRequest.from_header(request.to_header()) == request and ProbeRequest.from_header(None) is None


def test_probe_request_carries_the_variant() -> None:
    authors = probe_request(scaling=NitroScalingConfig(variant="authors_code"))
    assert authors.signal == "authors_code" and authors.subset_size is None
    assert ProbeRequest.from_header(authors.to_header()) == authors
    assert probe_request(scaling=NitroScalingConfig()).signal == "paper"
