"""The README's config reference, generated from the validated models.

``python -m nimbus.config_reference`` prints it; ``--write README.md`` updates the README in place.

A test compares the README's reference block with this output, so a new config key cannot ship
undocumented.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

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


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "")
    for noise in ("nimbus.", "Annotated[", "pydantic.", "NoneType"):
        text = text.replace(noise, "None" if noise == "NoneType" else "")
    return text.replace("|", "\\|")


def _default(field: FieldInfo) -> str:
    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
    else:
        return "**required**"
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{value!r}`"


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows: list[str] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        members = _models_in(field.annotation)
        if members:
            for member in members:
                tag = _tag(member)
                heading = f"{path} ({tag})" if len(members) > 1 and tag else path
                rows.append(f"| `{heading}` | section | | {member.__doc__.strip().splitlines()[0] if member.__doc__ else ''} |")
                rows += _rows(member, f"{path}.")
            continue
        description = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{path}` | {_type_name(field.annotation)} | {_default(field)} | {description} |")
    return rows


def _tag(model: type[BaseModel]) -> str | None:
    for key in ("name", "kind"):
        field = model.model_fields.get(key)
        if field is not None and isinstance(field.default, str):
            return f"{key}: {field.default}"
    return None


def reference_markdown() -> str:
    from nimbus.config import NimbusConfig

    lines = [BEGIN, "", "| key | type | default | meaning |", "|---|---|---|---|"]
    lines += _rows(NimbusConfig, "")
    lines += ["", END]
    return "\n".join(lines)


def write_into(*, path: Path) -> None:
    """Replace the reference block in ``path`` (the README) with the current reference."""
    text = path.read_text()
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:start] + reference_markdown() + text[stop:])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write_into(path=Path(sys.argv[2]))
    else:
        print(reference_markdown())
