"""``functions.<role>`` given in part keeps the role's section for the keys not given (actors.function,
learner.function), on the command line and in YAML alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config.loading import load_config

ROOT = Path(__file__).resolve().parents[3]
PPO = ROOT / "configs" / "ppo-cartpole.yaml"
FIELDS = {"cpus": 2.0, "gpus": 0.5, "memory_mb": 3000, "timeout_s": 77.0, "max_retries": 5, "heartbeat_s": 9.0}


@pytest.mark.parametrize("role,section", [("learner", "learner"), ("actor", "actors")])
@pytest.mark.parametrize("key", sorted(FIELDS))
def test_one_field_set_alone_keeps_the_others(role: str, section: str, key: str) -> None:
    base = load_config(path=PPO, overrides=[f"{section}.function.memory_mb=5000"])
    inherited = getattr(base, section).function
    value = FIELDS[key]
    config = load_config(path=PPO, overrides=[f"{section}.function.memory_mb=5000", f"functions.{role}.{key}={value}"])
    resolved = config.role_function(role=role)
    assert getattr(resolved, key) == value
    for other in FIELDS:
        if other != key:
            assert getattr(resolved, other) == getattr(inherited, other), other


def test_learner_cpus_alone_keeps_learner_function_defaults() -> None:
    config = load_config(path=PPO, overrides=["functions.learner.cpus=2"])
    learner = config.role_function(role="learner")
    assert (learner.cpus, learner.memory_mb, learner.timeout_s, learner.gpus) == (2.0, 4096, 600.0, 0.25)
    assert config.learner.function.cpus == 1.0   # the section itself is unchanged


def test_a_bad_value_still_names_its_key_path() -> None:
    from nimbus.errors import ConfigError

    with pytest.raises(ConfigError, match=r"functions\.learner\.cpus"):
        load_config(path=PPO, overrides=["functions.learner.cpus=-1"])
    with pytest.raises(ConfigError, match=r"learner\.function\.memory_mb"):
        load_config(path=PPO, overrides=["learner.function.memory_mb=1", "functions.learner.cpus=2"])
