"""Fixtures of the report tests."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures the report code draws, kept open (instead of closed after saving) for inspection."""
    close, kept = plt.close, []
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        close(fig)
