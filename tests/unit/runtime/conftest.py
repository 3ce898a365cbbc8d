"""Fixtures for runtime tests: a runtime factory that always shuts down."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger
from nimbus.runtime.local import LocalRuntime


@pytest.fixture
def make_runtime(tmp_path: Path) -> Iterator[Callable[..., tuple[LocalRuntime, Ledger]]]:
    created: list[LocalRuntime] = []

    def make(**kwargs) -> tuple[LocalRuntime, Ledger]:
        ledger = Ledger(path=tmp_path / f"ledger{len(created)}.jsonl")
        kwargs.setdefault("capacity_cpus", 2)
        runtime = LocalRuntime(ledger=ledger, **kwargs)
        created.append(runtime)
        return runtime, ledger

    yield make
    for runtime in created:
        runtime.shutdown()
