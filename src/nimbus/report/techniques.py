"""A technique's own panels of ``report.png``, found by name: report/ sits below the technique folders, so it names
their report modules here (as ``config/algo.py`` names algorithm sections) and imports one when a run's rows ask.

A technique's report module has ``EXTRA_ROWS`` (rows of two panels it adds below the common ones),
``applies(*, rows)`` (these metrics rows are this technique's run) and ``draw(*, axes, rows, run_dir)`` (it fills
``axes[2, 0]`` and its extra rows; ``axes[2, 1]`` is the cost per round for every run).

Example::

    panels = technique_panels(rows=rows)       # marless/report.py for a multi-agent run, else None
    if panels is not None:
        panels.draw(axes=axes, rows=rows, run_dir=run_dir)
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol

TECHNIQUE_PANELS: dict[str, str] = {
    "marless": "nimbus.marless.report",
}
"""Each technique with panels of its own, as the module that draws them (imported when asked)."""


class TechniquePanels(Protocol):
    EXTRA_ROWS: int

    def applies(self, *, rows: list[dict[str, Any]]) -> bool: ...

    def draw(self, *, axes: Any, rows: list[dict[str, Any]], run_dir: Path) -> None: ...


def technique_panels(*, rows: list[dict[str, Any]]) -> TechniquePanels | None:
    """The panels of the technique whose run wrote ``rows``, or None (the common panels only)."""
    for module in TECHNIQUE_PANELS.values():
        panels: TechniquePanels = importlib.import_module(module)  # type: ignore[assignment]
        if panels.applies(rows=rows):
            return panels
    return None
