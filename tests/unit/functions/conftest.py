"""Fixtures of the function tests: a real ShmStore (the per-test shared-memory prefix is tests/conftest.py's)."""

from __future__ import annotations

import uuid

import pytest

from nimbus.data.store import ShmStore


@pytest.fixture
def store():
    store = ShmStore(namespace=uuid.uuid4().hex[:8], owner=True)
    yield store
    store.close()
