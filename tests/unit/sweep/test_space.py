"""The sweep's search space (sweep/space.py): parsed, checked against the base config before any trial (exit 2
naming space.<key>), sampled through Optuna's trial API."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nimbus.errors import ConfigError
from nimbus.sweep.space import load_space, parse_space, with_values

BASE = {"name": "s", "seed": 0, "env": {"id": "CartPole-v1"}, "algo": {"name": "ppo"},
        "train": {"max_rounds": 3}}


def test_a_space_parses_each_kind_and_samples_through_optuna() -> None:
    optuna = pytest.importorskip("optuna")
    space = parse_space(data={"algo.lr": {"float": [1.0e-4, 1.0e-2], "log": True},
                              "env.num_envs_per_actor": {"int": [1, 4]},
                              "algo.num_epochs": {"int": [2, 8], "step": 2},
                              "algo.hidden_sizes": {"choice": [[32, 32], [64]]}}, base=BASE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(20):
        trial = study.ask()
        values = space.sample(trial=trial)
        assert 1.0e-4 <= values["algo.lr"] <= 1.0e-2 and 1 <= values["env.num_envs_per_actor"] <= 4
        assert values["algo.num_epochs"] in (2, 4, 6, 8) and values["algo.hidden_sizes"] in ([32, 32], [64])
        assert space.values_of(params=trial.params) == values      # choices stored by index, read back as values
        study.tell(trial, 0.0)


def test_with_values_sets_dotted_keys_on_a_copy() -> None:
    data = with_values(base=BASE, values={"algo.lr": 0.01, "env.num_envs_per_actor": 2})
    assert data["algo"] == {"name": "ppo", "lr": 0.01} and data["env"] == {"id": "CartPole-v1", "num_envs_per_actor": 2}
    assert BASE["algo"] == {"name": "ppo"}


@pytest.mark.parametrize("spec,match", [
    ({"algo.lrr": {"float": [0.1, 0.2]}}, r"space\.algo\.lrr: the value 0\.1 makes the config invalid"),
    ({"env.num_envs_per_actor": {"int": [0, 4]}}, r"space\.env\.num_envs_per_actor: the value 0"),
    ({"algo.lr": {"float": [0.1, 0.01]}}, r"space\.algo\.lr\.float: low 0\.1 must be below high"),
    ({"algo.lr": {"float": [0.0, 0.01], "log": True}}, r"space\.algo\.lr\.log: a log scale needs low > 0"),
    ({"algo.lr": {"uniform": [0.0, 0.01]}}, r"space\.algo\.lr: give exactly one of"),
    ({"algo.lr": {"float": [0.0, 0.01], "lgo": True}}, r"space\.algo\.lr: unknown keys \['lgo'\]"),
    ({"env.num_envs_per_actor": {"int": [1.5, 4]}}, r"space\.env\.num_envs_per_actor\.int: give \[low, high\]"),
    ({"seed": {"int": [0, 4]}}, r"space\.seed: the sweep sets seed, name and output itself"),
    ({"output.root_dir": {"choice": ["/etc", "/tmp"]}},
     r"space\.output\.root_dir: the sweep sets seed, name and output"),
    ({"algo.hidden_sizes": {"choice": [[64]]}}, r"space\.algo\.hidden_sizes\.choice: a list of at least two"),
    ([1, 2], r"space: a mapping of config key paths"),
])
def test_a_bad_space_names_its_key(spec, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_space(data=spec, base=BASE)


def test_a_space_file_that_is_missing_or_not_yaml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such space file"):
        load_space(path=tmp_path / "missing.yaml", base=BASE)
    (tmp_path / "bad.yaml").write_text("algo.lr: {float: [1, 2]\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_space(path=tmp_path / "bad.yaml", base=BASE)
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump({"algo.lr": {"float": [1.0e-4, 1.0e-3]}}))
    assert [d.key for d in load_space(path=tmp_path / "ok.yaml", base=BASE).dimensions] == ["algo.lr"]
