"""Fixtures of the data tests: ``buf``, a real shared-memory Buffer shaped by the test module's constants."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nimbus.data.buffer import Buffer


@pytest.fixture
def buf(request: pytest.FixtureRequest) -> Iterator[Buffer]:
    """A Buffer of the test module's ``SPEC`` with ``BUFFER_ROWS`` rows for ``BUFFER_ACTORS`` actors, closed
    (its segments unlinked) after the test. A module that uses ``buf`` names all three."""
    module = request.module
    with Buffer.create(spec=module.SPEC, capacity_rows=module.BUFFER_ROWS,
                       max_actors=module.BUFFER_ACTORS) as buffer:
        yield buffer
