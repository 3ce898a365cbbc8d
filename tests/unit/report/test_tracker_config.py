"""``output.loggers`` and its sections (config/sections.py OutputConfig, config/trackers.py): TensorBoard stays the
default, the old ``output.tensorboard`` bool exits 2 naming ``output.loggers``, a bad ``output.wandb`` /
``output.mlflow`` value exits 2 naming its key path, and a logger whose package is missing exits 2 naming the extra,
before any run directory exists."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nimbus.config import load_config, parse_config
from nimbus.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
CARTPOLE = REPO / "configs" / "ppo-cartpole.yaml"


def _load(*overrides: str):
    return load_config(path=CARTPOLE, overrides=list(overrides))


def test_tensorboard_is_the_default_logger() -> None:
    output = parse_config(data={"algo": {"name": "ppo"}}).output
    assert output.loggers == ("tensorboard",)
    assert (output.wandb.mode, output.mlflow.tracking_uri) == ("offline", None)


def test_loggers_take_any_of_the_three_in_order_or_none() -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra")
    assert _load("output.loggers=[mlflow, tensorboard]").output.loggers == ("mlflow", "tensorboard")
    assert _load("output.loggers=[]").output.loggers == ()


@pytest.mark.parametrize(("override", "message"), [
    ("output.tensorboard=false", r"output.tensorboard was replaced by output.loggers"),
    ("output.loggers=[neptune]", r"output.loggers.0: Input should be 'tensorboard', 'wandb' or 'mlflow'"),
    ("output.loggers=[wandb, wandb]", r"output.loggers: wandb named more than once"),
    ("output.loggers=tensorboard", r"output.loggers: Input should be a valid tuple"),
    ("output.wandb.project=team/project", r"output.wandb.project: String should match pattern"),
    ("output.wandb.mode=cloud", r"output.wandb.mode: Input should be 'offline' or 'online'"),
    ("output.wandb.colour=red", r"output.wandb.colour: unknown key"),
    ("output.mlflow.experiment=''", r"output.mlflow.experiment: String should have at least 1 character"),
    ("output.mlflow.tracking_uri=3", r"output.mlflow.tracking_uri: Input should be a valid string"),
])
def test_bad_tracker_settings_name_their_key_path(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(override)


@pytest.mark.parametrize("logger", ["wandb", "mlflow"])
def test_a_logger_whose_package_is_missing_names_its_extra(logger: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, logger, None)   # what importlib sees when the package is not installed
    with pytest.raises(ConfigError, match=rf"output.loggers: {logger} needs the {logger} extra, which is not "
                                          rf"installed: pip install 'nimbus-rl\[{logger}\]'"):
        _load(f"output.loggers=[tensorboard, {logger}]")
    assert _load("output.loggers=[tensorboard]").output.loggers == ("tensorboard",)   # not named: not needed


def _train(run_cli, *, tmp_path: Path, overrides: list[str]) -> tuple[int, str]:
    """``nimbus train`` in this process (tests/conftest.py's ``run_cli``): its exit code and what it printed."""
    sets = [item for override in [f"output.root_dir={tmp_path / 'runs'}", *overrides] for item in ("--set", override)]
    return run_cli("train", str(CARTPOLE), *sets)


def test_the_old_tensorboard_key_exits_2_before_anything_starts(tmp_path: Path, run_cli) -> None:
    code, said = _train(run_cli, tmp_path=tmp_path, overrides=["output.tensorboard=false"])
    assert code == 2, said
    assert "output.tensorboard was replaced by output.loggers" in said
    assert "loggers: [tensorboard]" in said   # the fix, printed as written (not eaten as markup)
    assert not (tmp_path / "runs").exists()


def test_a_missing_tracker_package_exits_2_before_anything_starts(tmp_path: Path, run_cli,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)   # what importlib sees when the package is not installed
    code, said = _train(run_cli, tmp_path=tmp_path, overrides=["output.loggers=[wandb]"])
    assert code == 2, said
    assert "output.loggers: wandb needs the wandb extra" in said and "nimbus-rl[wandb]" in said
    assert not (tmp_path / "runs").exists()
