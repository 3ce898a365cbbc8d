"""Fixtures of the GPU tests: the integration tests' CartPole config factory and the function tests' ShmStore."""

from __future__ import annotations

from tests.integration.conftest import make_config  # noqa: F401 - a fixture
from tests.unit.conftest import store  # noqa: F401 - a fixture
