"""Fixtures of the GPU tests: the integration tests' CartPole config factories and the function tests' ShmStore."""

from __future__ import annotations

from tests.integration.conftest import make_config, make_two_workloads  # noqa: F401 - fixtures
from tests.unit.conftest import store  # noqa: F401 - a fixture
