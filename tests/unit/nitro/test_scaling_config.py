"""Scaling configs: defaults, the kind discriminator, field-named validation errors (the scalers they make:
tests/unit/policy/test_scaling.py)."""

from __future__ import annotations

import pydantic
import pytest
from pydantic import TypeAdapter

from nimbus.nitro.config import (
    FixedScalingConfig,
    HydrozoaScalingConfig,
    MaxScalingConfig,
    NitroScalingConfig,
    ScalingConfig,
)

ADAPTER = TypeAdapter(ScalingConfig)


def _error_locs(data: dict) -> list[tuple]:
    with pytest.raises(pydantic.ValidationError) as caught:
        ADAPTER.validate_python(data)
    return [tuple(error["loc"]) for error in caught.value.errors()]


def test_nitro_defaults_are_the_papers() -> None:
    config = ADAPTER.validate_python({"kind": "nitro"})
    assert isinstance(config, NitroScalingConfig)
    assert (config.min_actors, config.max_actors, config.window, config.decay) == (8, 64, 6, 0.96)
    assert config.budget_usd is None and config.variant == "paper"
    assert (config.hessian.subset_size, config.hessian.max_iterations) == (None, 100)   # whole batch: measured


def test_kind_selects_the_config_class() -> None:
    assert isinstance(ADAPTER.validate_python({"kind": "fixed", "num_actors": 4}), FixedScalingConfig)
    assert isinstance(ADAPTER.validate_python({"kind": "max", "max_actors": 4}), MaxScalingConfig)
    hydrozoa = ADAPTER.validate_python(
        {"kind": "hydrozoa", "initial_actors": 2, "max_actors": 16, "double_every_rounds": 5}
    )
    assert isinstance(hydrozoa, HydrozoaScalingConfig)


def test_unknown_key_is_named() -> None:
    assert ("nitro", "max_actor") in _error_locs({"kind": "nitro", "max_actor": 32})
    assert ("nitro", "hessian", "iterations") in _error_locs({"kind": "nitro", "hessian": {"iterations": 5}})


def test_min_above_max_is_named() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        ADAPTER.validate_python({"kind": "nitro", "min_actors": 10, "max_actors": 5})
    (error,) = caught.value.errors()
    assert error["loc"] == ("nitro", "max_actors")
    assert "min_actors" in error["msg"]
    assert ("hydrozoa", "max_actors") in _error_locs(
        {"kind": "hydrozoa", "initial_actors": 10, "max_actors": 5, "double_every_rounds": 1}
    )


@pytest.mark.parametrize(
    ("data", "loc"),
    [({"kind": "nitro", "decay": 1.5}, ("nitro", "decay")),
     ({"kind": "nitro", "window": 1}, ("nitro", "window")),
     ({"kind": "nitro", "budget_usd": -1.0}, ("nitro", "budget_usd")),
     ({"kind": "nitro", "variant": "blog"}, ("nitro", "variant")),
     ({"kind": "fixed"}, ("fixed", "num_actors")),
     ({"kind": "nitrogen"}, ())],
)
def test_bad_values_are_named(data: dict, loc: tuple) -> None:
    locs = _error_locs(data)
    assert loc in locs or (loc == () and locs)


def test_configs_are_frozen() -> None:
    config = NitroScalingConfig()
    with pytest.raises(pydantic.ValidationError):
        config.max_actors = 10  # type: ignore[misc]
