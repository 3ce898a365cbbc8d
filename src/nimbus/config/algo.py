"""The ``algo:`` section, found by name: ``algo.name`` picks the algorithm's own config class, imported then.

``import nimbus.config`` loads no algorithm (nor torch): each algorithm's section is named here by module
path and imported the first time a config names it (``algo_section``). ``AlgoSection`` is the field type
of ``NimbusConfig.algo``; its errors keep their key paths (``algo.lr``). Adding an algorithm = one entry
in ``ALGO_SECTIONS`` (and its builder in nimbus/algos/registry.py; a test checks the two agree).

Example::

    algo_section(name="ppo")            # <class 'nimbus.algos.ppo.config.PPOConfig'>, imported now
    NimbusConfig.model_validate({"algo": {"name": "ppo", "lr": 1e-3}}).algo.lr
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any

from pydantic import BaseModel, PlainValidator, ValidationError, WithJsonSchema
from pydantic_core import PydanticCustomError

ALGO_SECTIONS: dict[str, str] = {
    "ppo": "nimbus.algos.ppo.config:PPOConfig",
    "dqn": "nimbus.algos.dqn.config:DQNConfig",
    "impala": "nimbus.algos.impala.config:ImpalaConfig",
    "sac": "nimbus.algos.sac.config:SACConfig",
    "ippo": "nimbus.algos.multiagent.config:IPPOConfig",
    "mappo": "nimbus.algos.multiagent.config:MAPPOConfig",
    "iql": "nimbus.algos.multiagent.config:IQLConfig",
    "vdn": "nimbus.algos.multiagent.config:VDNConfig",
    "qmix": "nimbus.algos.multiagent.config:QMIXConfig",
}
"""Every algorithm's config class by ``algo.name``, as ``module:Class`` (imported on first use)."""


def algo_section(*, name: str) -> type[BaseModel]:
    """The config class of the algorithm ``name`` (KeyError for an unknown name)."""
    module, _, attr = ALGO_SECTIONS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def _validate(value: Any) -> BaseModel:
    """``algo:`` as given (a mapping with ``name``, or an already-built section) → its algorithm's config."""
    names = ", ".join(ALGO_SECTIONS)
    if isinstance(value, BaseModel) and getattr(value, "name", None) in ALGO_SECTIONS and \
            isinstance(value, algo_section(name=value.name)):
        return value
    if not isinstance(value, dict):
        raise PydanticCustomError("algo_section", "expected a mapping with a name (one of {names})", {"names": names})
    name = value.get("name")
    if not isinstance(name, str) or name not in ALGO_SECTIONS:
        problem = "required" if name is None else f"{name!r} is not an algorithm"
        error = PydanticCustomError("algo_name", "{problem} (one of {names})", {"problem": problem, "names": names})
        raise ValidationError.from_exception_data("algo", [{"type": error, "loc": ("name",), "input": name}])
    return algo_section(name=name).model_validate(value)   # its errors keep their paths: algo.<key>


ALGO_VALIDATOR = PlainValidator(_validate)
"""Marks the ``algo`` field (the generated reference lists every algorithm's keys under it)."""

AlgoSection = Annotated[Any, ALGO_VALIDATOR,
                        WithJsonSchema({"type": "object", "description": "the algorithm's section, picked by name"})]
"""``NimbusConfig.algo``'s type: any algorithm's config, validated by the class its ``name`` picks."""
