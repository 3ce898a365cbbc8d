"""The field rules every algorithm section shares (schema/fields.py), checked on every section that uses them."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from nimbus.config.algo import ALGO_SECTIONS, algo_section

WIDTH_FIELDS = [(name, key) for name in ALGO_SECTIONS for key in ("hidden_sizes", "critic_hidden_sizes")
                if key in algo_section(name=name).model_fields]


def test_every_algorithm_declares_hidden_widths() -> None:
    assert {name for name, _ in WIDTH_FIELDS} == set(ALGO_SECTIONS)


@pytest.mark.parametrize(("name", "key"), WIDTH_FIELDS)
@pytest.mark.parametrize("widths", [[], [64, 0], [-1]])
def test_widths_refused_naming_the_field(name: str, key: str, widths: list[int]) -> None:
    message = f"{key} needs at least one layer, every width > 0; got {widths}"
    with pytest.raises(ValidationError, match=re.escape(message)):
        algo_section(name=name).model_validate({"name": name, key: widths})


@pytest.mark.parametrize(("name", "key"), WIDTH_FIELDS)
def test_widths_from_a_yaml_list_become_a_tuple(name: str, key: str) -> None:
    assert getattr(algo_section(name=name).model_validate({"name": name, key: [32, 16]}), key) == (32, 16)


@pytest.mark.parametrize(("name", "capacity_key"), [("dqn", "buffer_capacity"), ("sac", "buffer_capacity"),
                                                    ("iql", "replay_capacity"), ("vdn", "replay_capacity")])
def test_a_batch_larger_than_the_replay_is_refused(name: str, capacity_key: str) -> None:
    section = algo_section(name=name)
    assert section.model_validate({"name": name, "batch_size": 8, capacity_key: 8}).batch_size == 8
    with pytest.raises(ValidationError, match=rf"batch_size \(9\) exceeds {capacity_key} \(8\)"):
        section.model_validate({"name": name, "batch_size": 9, capacity_key: 8})


@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_custom_model_fields(name: str) -> None:
    section = algo_section(name=name)
    assert section().model is None and section().model_kwargs == {}
    assert section.model_fields["model_kwargs"].description == "keyword arguments for algo.model's constructor"
    built = section.model_validate({"name": name, "model": "pkg.mod:Net", "model_kwargs": {"width": 3}})
    assert (built.model, built.model_kwargs) == ("pkg.mod:Net", {"width": 3})
    with pytest.raises(ValidationError, match="should match pattern"):
        section.model_validate({"name": name, "model": "not a ref"})
