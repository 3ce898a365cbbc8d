"""Every number in every config model is a real number: inf, nan and booleans are refused with the key path.

``total_env_steps: true`` became 1 and ``algo.lr: .inf`` trained on (issue 28.7): the walk below covers every
numeric field of every model reachable from NimbusConfig, every algorithm's section and every scaler.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from nimbus.config import NimbusConfig, load_config, parse_config
from nimbus.config.algo import ALGO_SECTIONS, algo_section
from nimbus.errors import ConfigError


def _args(annotation: Any) -> tuple[Any, ...]:
    return typing.get_args(annotation) if typing.get_origin(annotation) in (
        typing.Union, types.UnionType, typing.Annotated, list, tuple, dict) else ()


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in _args(annotation) for model in _models(arg)]


def _numeric(annotation: Any) -> set[type]:
    """int / float in the annotation itself or its Optional (not inside containers)."""
    if annotation in (int, float):
        return {annotation}
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return {arg for arg in typing.get_args(annotation) if arg in (int, float)}
    return set()


def every_model() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [NimbusConfig, *(algo_section(name=name) for name in ALGO_SECTIONS)]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            todo += _models(field.annotation)
    return seen


CASES = [(model, name, kind) for model in every_model() for name, field in model.model_fields.items()
         for kind in sorted(_numeric(field.annotation), key=str)]


def test_the_walk_reaches_every_section() -> None:
    names = {model.__name__ for model in every_model()}
    assert {"NimbusConfig", "TrainConfig", "FunctionConfig", "StoreConfig", "PPOConfig", "VDNConfig",
            "NitroScalingConfig", "HessianProbeConfig", "PBTConfig", "MutationConfig", "MarlessConfig",
            "StellarisConfig", "OffPolicyConfig", "PrewarmConfig"} <= names
    assert len(CASES) > 150


@pytest.mark.parametrize("model,name,kind", CASES, ids=[f"{m.__name__}.{n}" for m, n, _ in CASES])
def test_every_numeric_field_refuses_inf_nan_and_booleans(model: type[BaseModel], name: str, kind: type) -> None:
    for value in (math.inf, -math.inf, math.nan, True, False):
        with pytest.raises(ValidationError) as caught:
            model.model_validate({name: value})
        failed = [error for error in caught.value.errors() if error["loc"][:1] == (name,)]
        assert failed, f"{model.__name__}.{name} accepted {value!r}"


def test_int_fields_refuse_floats_even_whole_ones() -> None:
    with pytest.raises(ConfigError, match=r"train\.total_env_steps: Input should be a valid integer"):
        parse_config(data={"algo": {"name": "ppo"}, "train": {"total_env_steps": 2000.0}})


@pytest.mark.parametrize("override,path", [
    ("algo.lr=.inf", r"algo\.lr"), ("algo.vf_coef=.inf", r"algo\.vf_coef"),
    ("train.target_return=.nan", r"train\.target_return"), ("train.total_env_steps=true", r"train\.total_env_steps"),
    ("actors.function.max_retries=1000000", r"actors\.function\.max_retries: .*less than or equal to 100"),
    ("functions.critic.max_retries=1000000", r"functions\.critic\.max_retries: .*less than or equal to 100"),
    ("store.max_retries=1000000", r"store\.max_retries: .*less than or equal to 100"),
    ("env.num_envs_per_actor=true", r"env\.num_envs_per_actor"), ("seed=true", r"seed"),
])
def test_the_issues_meaningless_values_are_refused_with_their_key(override: str, path: str) -> None:
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[3] / "configs" / "ppo-cartpole.yaml"
    with pytest.raises(ConfigError, match=path):
        load_config(path=shipped, overrides=[override])


def test_yaml_lists_still_fill_tuple_fields_and_ints_fill_float_fields() -> None:
    config = parse_config(data={"algo": {"name": "ppo", "hidden_sizes": [32, 16], "lr": 1},
                                "env": {"imports": ["math"]}})
    assert config.algo.hidden_sizes == (32, 16) and config.algo.lr == 1.0 and config.env.imports == ("math",)
    with pytest.raises(ConfigError, match=r"algo\.hidden_sizes\.0"):
        parse_config(data={"algo": {"name": "ppo", "hidden_sizes": [True, 16]}})
