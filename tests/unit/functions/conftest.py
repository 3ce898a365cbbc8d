"""Fixtures of the function tests: a per-test shared-memory prefix (swept afterwards) and a real ShmStore."""

from __future__ import annotations

import os
import uuid

import pytest

from nimbus.data.shm import PREFIX_ENV, sweep
from nimbus.data.store import ShmStore


@pytest.fixture(autouse=True)
def prefix(monkeypatch: pytest.MonkeyPatch):
    value = f"nimbus_t{os.getpid()}_{uuid.uuid4().hex[:8]}_"
    monkeypatch.setenv(PREFIX_ENV, value)
    yield value
    sweep(prefix=value)


@pytest.fixture
def store():
    store = ShmStore(namespace=uuid.uuid4().hex[:8], owner=True)
    yield store
    store.close()
