"""``ConfigSection``: the base of every config model (run sections, algorithms, scalers, populations).

Frozen, unknown keys rejected, and strict about numbers: an int field takes an int (not ``true``, not
``2.0``), a float field a finite int or float (not ``.inf``, ``.nan`` or ``true``), a bool field a bool. A
YAML list given for a tuple field becomes the tuple (strict mode alone would refuse it). A test walks
every config model and checks each numeric field refuses inf, nan and bools (tests/unit/config).

Example::

    class MySection(ConfigSection):
        lr: float = Field(default=3e-4, gt=0)   # .inf, .nan and true are refused with the key path
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


def _is_tuple(annotation: Any) -> bool:
    """A ``tuple[...]`` annotation, or an Optional/Union holding one."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return True
    return origin in (typing.Union, types.UnionType) and any(_is_tuple(arg) for arg in typing.get_args(annotation))


class ConfigSection(BaseModel):
    # A key's docstring (the string under it) documents it in docs/config.md; config/reference.py reads it from the
    # source there, so importing the models does not (pydantic's use_attribute_docstrings did, in every process).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _lists_to_tuples(cls, data: Any) -> Any:
        """YAML has no tuples: a list given for a tuple field is that tuple (its items stay strict)."""
        if not isinstance(data, dict):
            return data
        lists = [name for name, value in data.items() if isinstance(value, list) and name in cls.model_fields
                 and _is_tuple(cls.model_fields[name].annotation)]
        return {**data, **{name: tuple(data[name]) for name in lists}} if lists else data
