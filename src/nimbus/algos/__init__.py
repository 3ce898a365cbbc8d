"""Algorithms: pure math over torch (each implements algos/base.py's ``Algorithm``). One subpackage per algorithm.

An algorithm's package names its parts (``from nimbus.algos.dqn import DQN``) but imports them on first use
(:func:`lazy_exports`): validating a config imports ``nimbus.algos.<name>.config``, and with it the package, so an
eager package would load torch before a bad config could exit 2.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(*, package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A package's module-level ``__getattr__`` (PEP 562): each name of ``homes`` from the submodule it maps to,
    imported on first use.

    Example (in ``nimbus/algos/dqn/__init__.py``)::

        __getattr__ = lazy_exports(package=__name__, homes={"DQN": "algorithm", "DQNConfig": "config"})
    """
    def __getattr__(name: str) -> Any:
        if name in homes:
            return getattr(import_module(f"{package}.{homes[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__
