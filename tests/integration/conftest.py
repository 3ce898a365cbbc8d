from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nimbus.config import NimbusConfig, apply_overrides, load_config, parse_config

REPO = Path(__file__).resolve().parents[2]


def cartpole_config(*, tmp_path: Path, overrides: list[str] | None = None, **sections: Any) -> NimbusConfig:
    """The shipped PPO CartPole config, quiet, writing under tmp_path."""
    base = load_config(path=REPO / "configs" / "ppo-cartpole.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return parse_config(data=apply_overrides(data=base, overrides=overrides or []))


@pytest.fixture
def make_shipped_config(tmp_path: Path):
    """Any shipped config by name (configs/<name>.yaml), quiet, writing under tmp_path."""
    def factory(name: str, overrides: list[str] | None = None) -> NimbusConfig:
        base = load_config(path=REPO / "configs" / f"{name}.yaml").model_dump(mode="json")
        base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
        base["train"]["eval_episodes"] = 0
        return parse_config(data=apply_overrides(data=base, overrides=overrides or []))
    return factory


@pytest.fixture
def make_config(tmp_path: Path):
    def factory(overrides: list[str] | None = None, **sections: Any) -> NimbusConfig:
        return cartpole_config(tmp_path=tmp_path, overrides=overrides, **sections)
    return factory


@pytest.fixture
def make_two_workloads(make_config):
    """Two CartPole workloads for one pool (run/workloads.py): cartA with seed 0 and cartB with seed 1, each with
    ``overrides`` (``make_two_workloads(["train.max_rounds=2"])``)."""
    def factory(overrides: list[str]) -> list[NimbusConfig]:
        return [make_config(overrides=[f"name={name}", f"seed={seed}", *overrides])
                for name, seed in (("cartA", 0), ("cartB", 1))]
    return factory
