"""policy/scaling.py: every scaling kind finds its scaler by name, and only a scaler with state is checkpointed."""

from __future__ import annotations

import typing

import numpy as np

from nimbus.nitro.baselines import FixedScaler, HydrozoaScaler, MaxScaler
from nimbus.nitro.config import (
    FixedScalingConfig,
    HydrozoaScalingConfig,
    MaxScalingConfig,
    NitroScalingConfig,
    ScalingConfig,
)
from nimbus.nitro.scaler import NitroScaler
from nimbus.nitro.scaler_authors import AuthorsCodeNitroScaler
from nimbus.policy.scaling import SCALERS, StatefulScaler, make_scaler


def test_the_registry_names_every_kind_of_the_scaling_section() -> None:
    members = typing.get_args(typing.get_args(ScalingConfig)[0])
    assert sorted(SCALERS) == sorted(member.model_fields["kind"].default for member in members)


def test_make_scaler_builds_each_kind() -> None:
    nitro = make_scaler(config=NitroScalingConfig(min_actors=2, max_actors=16, budget_usd=3.0, variant="authors_code",
                                                  on_budget="min"))
    assert isinstance(nitro, AuthorsCodeNitroScaler)
    assert (nitro.min_actors, nitro.max_actors, nitro.budget_usd, nitro.variant) == (2, 16, 3.0, "authors_code")
    assert nitro.budget.on_budget == "min"
    paper = make_scaler(config=NitroScalingConfig())
    assert isinstance(paper, NitroScaler) and paper.budget.on_budget == "stop"   # the documented default
    assert isinstance(make_scaler(config=FixedScalingConfig(num_actors=3)), FixedScaler)
    assert isinstance(make_scaler(config=MaxScalingConfig(max_actors=3)), MaxScaler)
    hydrozoa = make_scaler(config=HydrozoaScalingConfig(initial_actors=1, max_actors=8, double_every_rounds=2))
    assert isinstance(hydrozoa, HydrozoaScaler) and hydrozoa.initial().num_actors == 1


def test_nitro_s_scalers_have_state_to_checkpoint_and_the_baselines_none() -> None:
    """The replay file keeps ``scaler.*`` arrays exactly for the scalers that are StatefulScaler."""
    configs = [NitroScalingConfig(), NitroScalingConfig(variant="authors_code"), FixedScalingConfig(num_actors=3),
               MaxScalingConfig(max_actors=3), HydrozoaScalingConfig(initial_actors=1, max_actors=8,
                                                                     double_every_rounds=2)]
    stateful = [isinstance(make_scaler(config=config), StatefulScaler) for config in configs]
    assert stateful == [True, True, False, False, False]


def test_a_stateful_scaler_s_state_goes_back() -> None:
    scaler = make_scaler(config=NitroScalingConfig(window=3))
    assert isinstance(scaler, StatefulScaler)
    state = {"window": np.array([1.5, 2.0]), "counters": np.array([4, 1], dtype=np.int64)}
    scaler.load_state_dict(state)
    restored = scaler.state_dict()
    assert restored.keys() == state.keys() and all(np.array_equal(restored[k], state[k]) for k in state)
