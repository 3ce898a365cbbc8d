"""The config reference (docs/config.md), generated from the validated models.

``python -m nimbus.config.reference`` prints it; ``--write docs/config.md`` updates the page in place.

A test compares docs/config.md's reference block with this output, so a new config key cannot ship
undocumented; the README links the page.

A key's meaning is its ``Field(description=...)`` or else the string literal under it in the class body (an attribute
docstring), read here from the source, as pydantic's ``use_attribute_docstrings`` would read it: that option made
every process that imports nimbus.config parse the source of ~40 classes (76 of 137 ms of the import), and only this
page reads the result.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from nimbus.config.algo import ALGO_SECTIONS, ALGO_VALIDATOR, algo_section
from nimbus.config.root import NimbusConfig

BEGIN = "<!-- config-reference:begin -->"
END = "<!-- config-reference:end -->"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes an annotation refers to (through Optional, Union, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def _algo_members(field: FieldInfo) -> list[type[BaseModel]]:
    """The ``algo`` section (config/algo.py) stands for every algorithm's config, each imported here."""
    if ALGO_VALIDATOR not in field.metadata:
        return []
    return [algo_section(name=name) for name in ALGO_SECTIONS]


@functools.cache
def _attribute_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field name → the string literal that follows its annotated assignment in the body of ``model`` or of the
    nearest base class that declares it (cleaned as a docstring)."""
    found: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):   # no source (a model built at run time): no docstrings
            continue
        body = next((node.body for node in tree.body if isinstance(node, ast.ClassDef)), [])
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def _meaning(model: type[BaseModel], name: str, field: FieldInfo) -> str | None:
    """A key's description: ``Field(description=...)``, else its attribute docstring."""
    return field.description or _attribute_docstrings(model).get(name)


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "")
    for noise in ("nimbus.", "Annotated[", "pydantic.", "NoneType"):
        text = text.replace(noise, "None" if noise == "NoneType" else "")
    return text.replace("|", "\\|")


_NO_DEFAULT = object()


def _default_value(field: FieldInfo) -> Any:
    """The field's default value; ``_NO_DEFAULT`` when it is required or its factory needs arguments."""
    if field.default is not PydanticUndefined:
        return field.default
    if field.default_factory is not None:
        try:
            return field.default_factory()
        except TypeError:
            return _NO_DEFAULT
    return _NO_DEFAULT


def _default(field: FieldInfo, *, value: Any) -> str:
    if value is _NO_DEFAULT:
        return "**required**" if field.default is PydanticUndefined and field.default_factory is None else "(computed)"
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{value!r}`"


def _rows(model: type[BaseModel], prefix: str, defaults: BaseModel | None = None,
          inherits: str | None = None) -> list[str]:
    """One row per key of ``model``. ``defaults``: the instance a parent section's default factory builds;
    its values (``learner.function``'s 600 s, 4096 MB) are the real defaults, and a section given in part
    keeps them (config.Section), so they are what the rows show. ``inherits``: the section whose values
    the keys not given take (``functions.learner`` → ``learner.function``), shown instead of a value."""
    rows: list[str] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        value = getattr(defaults, name) if defaults is not None else _default_value(field)
        members = _algo_members(field) or _models_in(field.annotation)
        if len(members) == 1:
            meaning = _meaning(model, name, field) or _first_line(members[0].__doc__)
            shown = "" if isinstance(value, BaseModel) or value is _NO_DEFAULT else f"`{value!r}`"
            rows.append(f"| `{path}` | section |{_pad(shown)}| {_cell(meaning)} |")
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            rows += _rows(members[0], f"{path}.", value if isinstance(value, members[0]) else None,
                          inherits=extra.get("inherits"))
            continue
        for member in members:   # a union: each member's keys under its tag, with the member's own defaults
            tag = _tag(member)
            heading = f"{path} ({tag})" if tag else path
            shown = f"default: {_settings(value)}" if isinstance(value, member) else ""
            rows.append(f"| `{heading}` | section |{_pad(shown)}| {_cell(_first_line(member.__doc__))} |")
            rows += _rows(member, f"{path}.")
        if not members:
            shown = f"{inherits}'s" if inherits else _default(field, value=value)
            rows.append(f"| `{path}` | {_type_name(field.annotation)} | {shown} | "
                        f"{_cell(_meaning(model, name, field) or '')} |")
    return rows


def _pad(text: str) -> str:
    return f" {text} " if text else " "


def _first_line(doc: str | None) -> str:
    return doc.strip().splitlines()[0] if doc else ""


def _cell(text: str) -> str:
    """One table cell: a docstring's lines joined (a newline would end the row), pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _settings(instance: BaseModel) -> str:
    """``kind: fixed`` → ``num_actors=2``: the default member's values other than its tag."""
    values = {k: v for k, v in instance.model_dump().items() if k not in ("name", "kind")}
    return ", ".join(f"`{k}={v!r}`" for k, v in values.items())


def _tag(model: type[BaseModel]) -> str | None:
    for key in ("name", "kind"):
        field = model.model_fields.get(key)
        if field is not None and isinstance(field.default, str):
            return f"{key}: {field.default}"
    return None


def reference_markdown() -> str:
    lines = [BEGIN, "", "| key | type | default | meaning |", "|---|---|---|---|"]
    lines += _rows(NimbusConfig, "")
    lines += ["", END]
    return "\n".join(lines)


def write_into(*, path: Path) -> None:
    """Replace the reference block in ``path`` (docs/config.md) with the current reference."""
    text = path.read_text()
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:start] + reference_markdown() + text[stop:])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write_into(path=Path(sys.argv[2]))
    else:
        print(reference_markdown())
