"""core.py's protocols match the code (issue 24 item 1): every implementation has every protocol member with
the same parameter names and kinds (keyword-only stays keyword-only), so a renamed or removed method fails here;
and importing nimbus.core loads neither torch nor numpy."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import typing
from typing import Any

import pytest

from nimbus import core
from nimbus.data.buffer import Buffer
from nimbus.data.channel import Outbox
from nimbus.data.inbox import Inbox
from nimbus.data.ray_channel import RayInbox, RayOutbox
from nimbus.data.ray_store import RayStore
from nimbus.data.redis_store import RedisStore
from nimbus.data.store import ShmStore
from nimbus.data.stores import MirroredStore
from nimbus.data.triggers import DataKeyTrigger, ObjectKeyTrigger, TimeTrigger, TransferTrigger
from nimbus.nitro.baselines import FixedScaler, HydrozoaScaler, MaxScaler
from nimbus.nitro.scaler import NitroScaler
from nimbus.nitro.scaler_authors import AuthorsCodeNitroScaler
from nimbus.runtime.factory import StampedRuntime
from nimbus.runtime.inline import InlineRuntime
from nimbus.runtime.local import LocalRuntime
from nimbus.runtime.ray_backend import RayRuntime

IMPLEMENTATIONS: list[tuple[type, type]] = [
    *((core.Runtime, cls) for cls in (LocalRuntime, InlineRuntime, RayRuntime, StampedRuntime)),
    *((core.Store, cls) for cls in (ShmStore, MirroredStore, RedisStore, RayStore)),
    *((core.Outbox, cls) for cls in (Outbox, RayOutbox)),
    *((core.Inbox, cls) for cls in (Inbox, RayInbox)),
    (core.Buffer, Buffer),
    *((core.Trigger, cls) for cls in (DataKeyTrigger, ObjectKeyTrigger, TimeTrigger, TransferTrigger)),
    *((core.ActorScaler, cls) for cls in (FixedScaler, HydrozoaScaler, MaxScaler, NitroScaler,
                                          AuthorsCodeNitroScaler)),
]
_PROTOCOL_NOISE = {"__init__", "__module__", "__doc__", "__dict__", "__weakref__", "__parameters__", "__orig_bases__",
                   "__protocol_attrs__", "__non_callable_proto_members__", "__subclasshook__", "__abstractmethods__",
                   "__static_attributes__", "__firstlineno__", "__annotations__", "__type_params__",
                   "__annotate_func__", "__annotations_cache__", "_is_protocol", "_is_runtime_protocol", "_abc_impl"}


def members(protocol: type) -> dict[str, Any]:
    """The protocol's own members (methods, properties, annotated attributes), bases included."""
    found: dict[str, Any] = {}
    for klass in reversed(protocol.__mro__):
        if klass in (object,) or not getattr(klass, "_is_protocol", False) or klass.__module__ == "typing":
            continue
        found.update({name: value for name, value in vars(klass).items() if name not in _PROTOCOL_NOISE})
        found.update({name: None for name in vars(klass).get("__annotations__", {})})
    return found


def _params(fn: Any) -> dict[str, inspect.Parameter]:
    return {name: p for name, p in inspect.signature(fn).parameters.items() if name not in ("self", "cls")}


def mismatches(*, protocol: type, impl: type) -> list[str]:
    """Every way ``impl`` departs from ``protocol``: a missing member, a property that is not one, a parameter of
    the protocol that is missing or of another kind, a default the implementation requires, an extra parameter
    without a default."""
    problems = []
    for name, want in members(protocol).items():
        have = inspect.getattr_static(impl, name, None)
        if have is None:
            problems.append(f"{name}: missing")
        elif isinstance(want, property) != isinstance(have, property):
            problems.append(f"{name}: property on one side only")
        elif callable(want) or isinstance(want, (classmethod, staticmethod)):
            wanted, had = _params(getattr(protocol, name)), _params(getattr(impl, name))
            for pname, p in wanted.items():
                q = had.get(pname)
                if q is None or q.kind != p.kind:
                    problems.append(f"{name}({pname}): {'missing' if q is None else q.kind.description}")
                elif p.default is not p.empty and q.default is q.empty:
                    problems.append(f"{name}({pname}): required, the protocol has a default")
            problems += [f"{name}({pname}): extra and required" for pname, q in had.items()
                         if pname not in wanted and q.default is q.empty
                         and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)]
    return problems


@pytest.mark.parametrize(("protocol", "impl"), IMPLEMENTATIONS, ids=lambda x: x.__name__)
def test_every_implementation_has_its_protocols_methods_with_the_same_keywords(protocol: type, impl: type) -> None:
    assert mismatches(protocol=protocol, impl=impl) == []
    assert members(protocol), "a protocol with no members checks nothing"


def test_a_renamed_keyword_or_a_missing_method_is_a_mismatch() -> None:
    class Renamed:
        def check(self, *, now: float) -> bool: ...      # now_s renamed
        def reset(self) -> None: ...

    class Positional:
        def check(self, now_s: float) -> bool: ...       # no longer keyword-only

    class Missing:
        def check(self, *, now_s: float, extra: int) -> bool: ...

    assert mismatches(protocol=core.Trigger, impl=Renamed) == ["check(now_s): missing",
                                                                "check(now): extra and required"]
    assert mismatches(protocol=core.Trigger, impl=Positional) == ["check(now_s): positional or keyword",
                                                                   "reset: missing"]
    assert mismatches(protocol=core.Trigger, impl=Missing) == ["check(extra): extra and required", "reset: missing"]
    assert "capacity_rows: property on one side only" in mismatches(
        protocol=core.Buffer, impl=type("NoProperty", (), {"capacity_rows": lambda self: 0}))


def test_every_annotation_in_core_names_a_real_type() -> None:
    """Every name core.py's annotations use is in its TYPE_CHECKING block (the standard library's and numpy's) or in
    TYPE_HOMES, which core.py keeps instead of importing them, and lives where TYPE_HOMES says (a moved class fails
    here)."""
    tree = ast.parse(inspect.getsource(core))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    namespace: dict[str, Any] = dict(vars(core))
    exec(compile(ast.Module(body=block.body, type_ignores=[]), "core-type-checking", "exec"), namespace)
    namespace |= {name: getattr(importlib.import_module(module), name) for name, module in core.TYPE_HOMES.items()}
    protocols = [cls for cls in vars(core).values() if isinstance(cls, type) and getattr(cls, "_is_protocol", False)]
    checked = 0
    for protocol in protocols:
        typing.get_type_hints(protocol, globalns=namespace)   # its annotated attributes (Workflow.progress)
        for name, member in members(protocol).items():
            target = member.fget if isinstance(member, property) else getattr(protocol, name, None)
            if callable(target):
                typing.get_type_hints(target, globalns=namespace)
                checked += 1
    assert len(protocols) >= 9 and checked > 30


def test_the_old_protocol_names_are_the_core_ones() -> None:
    from nimbus.data.store import Store
    from nimbus.data.triggers import Trigger
    from nimbus.runtime.base import Runtime
    from nimbus.types import ActorScaler, Controller

    assert (Runtime, Store, Trigger, Controller, ActorScaler) == (
        core.Runtime, core.Store, core.Trigger, core.Controller, core.ActorScaler)


def test_every_workflow_implements_workflow_as_its_docstring_says() -> None:
    """Every registered workflow meets core.Workflow method by method (``progress`` and ``stop_requested`` are set
    in __init__) and the docstring names each class: the one loop drives them all; the loop's RoundBook meets
    core.Book, and a workflow no loop attached a book to says so when it reaches for it."""
    from nimbus.run.registry import WORKFLOWS, workflow_class

    assert set(members(core.Workflow)) == {
        "progress", "poll_period_s", "stop_requested", "build", "metrics", "start", "publish", "prewarm",
        "attach", "begin", "handle", "poll", "exhausted", "renewed", "request_stop", "checkpoint", "evaluate", "close"}
    for name in WORKFLOWS:
        workflow = workflow_class(name=name)
        assert sorted(mismatches(protocol=core.Workflow, impl=workflow)) == \
            ["progress: missing", "stop_requested: missing"], name
        assert workflow.__name__ in core.Workflow.__doc__
    from nimbus.run.book import RoundBook

    assert mismatches(protocol=core.Book, impl=RoundBook) == ["meter: missing"]   # set in __init__
    with pytest.raises(RuntimeError, match="before the run loop attached one"):
        core.UNBOOKED.bill_round()


def test_importing_core_loads_neither_torch_nor_numpy_nor_other_nimbus_modules() -> None:
    code = ("import sys, nimbus.core; print('torch' in sys.modules, 'numpy' in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith('nimbus')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = done.stdout.strip().split(maxsplit=2)
    assert out == ["False", "False", "['nimbus', 'nimbus.core']"]
