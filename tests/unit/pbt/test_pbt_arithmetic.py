"""PBT's arithmetic (pbt/explore.py) and the population config's bad-input rules."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from nimbus.config import load_config
from nimbus.errors import ConfigError
from nimbus.pbt.config import MutationConfig
from nimbus.pbt.explore import exploit_source, explore, initial_values, quantile_size, ranked

REPO = Path(__file__).resolve().parents[3]
LR = MutationConfig(low=1e-5, high=1e-2, log=True)


def test_ranking_and_quantiles() -> None:
    scores = {"a": 3.0, "b": 9.0, "c": 3.0, "d": -1.0, "e": 5.0}
    assert ranked(scores=scores) == ["b", "e", "a", "c", "d"]  # ties by name
    assert [quantile_size(members=p, fraction=0.25) for p in (2, 4, 7, 8)] == [1, 1, 1, 2]
    assert quantile_size(members=10, fraction=0.5) == 5


def test_only_the_bottom_fraction_exploits_and_copies_a_top_member() -> None:
    scores = {"m0": 10.0, "m1": 8.0, "m2": 2.0, "m3": 1.0, "m4": 0.5, "m5": 7.0, "m6": 6.0, "m7": 0.0}
    rng = np.random.default_rng(0)
    assert {m: exploit_source(member=m, scores=scores, fraction=0.25, rng=rng)
            for m in ("m0", "m1", "m5", "m6", "m2", "m3")} == dict.fromkeys(("m0", "m1", "m5", "m6", "m2", "m3"))
    sources = {exploit_source(member=m, scores=scores, fraction=0.25, rng=rng) for m in ("m4", "m7") for _ in range(40)}
    assert sources == {"m0", "m1"}  # bottom two (m4, m7) copy one of the top two, drawn uniformly


def test_explore_perturbs_by_the_factors_clips_and_keeps_integers() -> None:
    space = {"lr": LR, "num_epochs": MutationConfig(low=1, high=30)}
    rng = np.random.default_rng(1)
    seen = set()
    for _ in range(50):
        out = explore(values={"lr": 1e-3, "num_epochs": 10}, space=space, factors=(0.8, 1.2),
                      resample_probability=0.0, rng=rng)
        seen.add((round(out["lr"], 12), out["num_epochs"]))
        assert isinstance(out["num_epochs"], int)
    assert {lr for lr, _ in seen} == {0.0008, 0.0012} and {n for _, n in seen} == {8, 12}
    clipped = explore(values={"lr": 9.9e-3, "num_epochs": 30}, space=space, factors=(1.2, 1.2),
                      resample_probability=0.0, rng=rng)
    assert clipped == {"lr": 1e-2, "num_epochs": 30}


def test_resampling_draws_log_uniformly_inside_the_range() -> None:
    rng = np.random.default_rng(2)
    draws = [explore(values={"lr": 1e-3}, space={"lr": LR}, factors=(0.8, 1.2), resample_probability=1.0,
                     rng=rng)["lr"] for _ in range(2000)]
    logs = np.log10(draws)
    assert min(draws) >= 1e-5 and max(draws) <= 1e-2
    assert abs(np.mean(logs) - (-3.5)) < 0.06       # log-uniform on [-5, -2]: mean -3.5
    assert abs(np.mean(np.array(draws) < 1e-4) - 1 / 3) < 0.04
    first = initial_values(space={"lr": LR}, members=4, seed=0)
    assert first == initial_values(space={"lr": LR}, members=4, seed=0) and len({d["lr"] for d in first}) == 4
    assert all(math.log10(d["lr"]) >= -5 for d in first)


@pytest.mark.parametrize("override, message", [
    ("pbt={hyperparameters: {lrr: {low: 0.1, high: 1}}}", "pbt.hyperparameters.lrr: 'lrr' is not a hyperparameter"),
    ("pbt={hyperparameters: {lr: {low: -1.0, high: 0.1}}}", "pbt.hyperparameters.lr.low: -1.0 is outside the valid"),
    ("pbt={hyperparameters: {gae_lambda: {low: 0.5, high: 1.5}}}",
     "pbt.hyperparameters.gae_lambda.high: 1.5 is outside"),
    ("policies=[{name: a}, {name: a}]", "policies.1.name: duplicate policy name 'a'"),
    ("policies=[{name: a, algo: {lr: 0}}]", "policies.0.algo.lr: 0 is outside the valid range"),
    ("pbt={hyperparameters: {lr: {low: 0.1, high: 0.01}}}", "pbt.hyperparameters.lr"),
])
def test_bad_population_configs_name_the_key_path(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match="invalid config") as info:
        load_config(path=REPO / "configs" / "ppo-cartpole.yaml", overrides=[override])
    assert message in str(info.value)
