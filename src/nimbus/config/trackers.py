"""The tracker settings (report/trackers.py): which experiment trackers a run logs to, and where.

Here in the config layer, not beside report/trackers.py: config/sections.py's OutputConfig holds them, and a
``nimbus.report.config`` would import ``nimbus.config`` (whose package imports sections.py) while half loaded.

They are the ``output`` section's ``loggers``, ``wandb`` and ``mlflow`` keys (config/sections.py OutputConfig)::

    output:
      loggers: [tensorboard, wandb, mlflow]           # default: [tensorboard]; [] for none
      wandb: {project: my-sweep, mode: offline}       # offline files under RUN_DIR/wandb; `wandb sync` later
      mlflow: {tracking_uri: http://mlflow:5000}      # default: sqlite:///RUN_DIR/mlflow.db

``check_loggers`` is the section's rule: each logger named once, and its package importable (W&B and MLflow are
optional extras), so a config naming one that is not installed exits 2 before anything starts.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import Field

from nimbus.schema.base import ConfigSection

Logger = Literal["tensorboard", "wandb", "mlflow"]
EXTRAS: dict[str, str] = {"wandb": "wandb", "mlflow": "mlflow"}   # logger → its package (the extra's name too)


class WandbConfig(ConfigSection):
    project: str = Field(default="nimbus", min_length=1, max_length=128, pattern=r"^[^/\\#?%:]+$")
    """W&B project the run is logged to (at most 128 characters, none of / \\ # ? % :)"""
    entity: str | None = Field(default=None, min_length=1)
    """W&B entity (user or team); null: your default entity"""
    mode: Literal["offline", "online"] = "offline"
    """offline: files under RUN_DIR/wandb, synced later with `wandb sync`; online: streamed (needs a login)"""


class MlflowConfig(ConfigSection):
    tracking_uri: str | None = Field(default=None, min_length=1)
    """MLflow tracking URI (http://…, sqlite:///…); null: sqlite:///RUN_DIR/mlflow.db, artifacts in
    RUN_DIR/mlartifacts"""
    experiment: str = Field(default="nimbus", min_length=1)
    """MLflow experiment the run is logged to (created when missing)"""


def check_loggers(*, loggers: tuple[str, ...]) -> None:
    """``output.loggers``: each named once, and W&B's or MLflow's package installed (raised as ValueError, so
    pydantic reports it under the key path and the CLI exits 2)."""
    twice = sorted({name for name in loggers if loggers.count(name) > 1})
    if twice:
        raise ValueError(f"output.loggers: {', '.join(twice)} named more than once")
    for name in loggers:
        package = EXTRAS.get(name)
        if package is not None and importlib.util.find_spec(package) is None:
            raise ValueError(f"output.loggers: {name} needs the {package} extra, which is not installed: "
                             f"pip install 'nimbus-rl[{package}]'")
