"""Field types and checks that several algorithm sections (``algos/<name>/config.py``) share.

Each section still declares its own fields, in its own order and with its own defaults and docstrings
(the order is the order of the resolved YAML); what is shared is a field's *rule*, written once here:

* ``Widths``: MLP hidden widths, at least one layer and every width > 0, the error naming the field;
* ``ModelRef`` and ``ModelKwargs``: the ``model`` / ``model_kwargs`` pair of a user's torch module
  (models/custom.py), with their descriptions;
* ``check_batch_fits``: a batch cannot be larger than the replay it is drawn from.

Example::

    class MyConfig(ConfigSection):
        hidden_sizes: Widths = (64, 64)
        \"\"\"MLP widths\"\"\"
        model: ModelRef = None
        model_kwargs: ModelKwargs
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo


def _positive_widths(value: tuple[int, ...], info: ValidationInfo) -> tuple[int, ...]:
    if not value or any(width <= 0 for width in value):
        raise ValueError(f"{info.field_name} needs at least one layer, every width > 0; got {list(value)}")
    return value


Widths = Annotated[tuple[int, ...], AfterValidator(_positive_widths)]
"""MLP hidden widths: at least one layer, every width > 0."""

ModelRef = Annotated[str | None, Field(pattern=r"^[A-Za-z_][\w.]*[:.][A-Za-z_][\w.]*$",
                                       description="your torch module instead of the built-in network, "
                                                   "pkg.module:Class (README: custom models)")]
"""``algo.model``: a user's network as ``pkg.module:Class`` (None: the built-in one)."""

ModelKwargs = Annotated[dict[str, Any], Field(default_factory=dict,
                                              description="keyword arguments for algo.model's constructor")]
"""``algo.model_kwargs``: the keyword arguments of ``algo.model``'s constructor (default: none)."""


def check_batch_fits(*, batch_size: int, capacity: int, capacity_key: str) -> None:
    """Refuse a batch larger than the replay it is drawn from (``capacity_key`` names the replay's field)."""
    if batch_size > capacity:
        raise ValueError(f"batch_size ({batch_size}) exceeds {capacity_key} ({capacity})")
