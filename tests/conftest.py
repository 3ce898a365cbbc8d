"""Shared fixtures: a per-test shared-memory prefix, and a check that no test leaks a segment."""

from __future__ import annotations

import os

import pytest
import torch

from nimbus.data import shm


@pytest.fixture(autouse=True)
def _isolated_shm_prefix(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """Each test gets its own segment prefix so leaks are attributable and swept."""
    prefix = f"nimbus_{os.getpid()}_t{abs(hash(request.node.nodeid)) % 10**8}_"
    monkeypatch.setenv(shm.PREFIX_ENV, prefix)
    yield prefix
    shm.sweep(prefix=prefix)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
