"""A conformance check stronger than a type annotation: every method of a Protocol, same keyword-only parameters."""

from __future__ import annotations

import inspect


def assert_implements(obj: object, protocol: type, *, methods: tuple[str, ...]) -> None:
    """``obj`` has each of ``methods`` of ``protocol`` with the same parameters (names and kinds, less self)."""
    for name in methods:
        expected = inspect.signature(getattr(protocol, name))
        wanted = [(p.name, p.kind) for p in expected.parameters.values() if p.name != "self"]
        got = inspect.signature(getattr(obj, name))
        assert [(p.name, p.kind) for p in got.parameters.values()] == wanted, f"{type(obj).__name__}.{name}"
