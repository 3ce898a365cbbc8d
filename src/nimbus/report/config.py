"""The tracker settings (report/trackers.py): which experiment trackers a run logs to, and where.

Not read from a run's config yet: they become ``output.loggers``, ``output.wandb`` and ``output.mlflow`` when the
trackers are wired into the run loop (issue 29, item 1). The intended YAML::

    output:
      loggers: [tensorboard, wandb, mlflow]
      wandb: {project: my-sweep, mode: offline}       # offline files under RUN_DIR/wandb; `wandb sync` later
      mlflow: {tracking_uri: http://mlflow:5000}      # default: sqlite:///RUN_DIR/mlflow.db
"""

from __future__ import annotations

from typing import Literal

from nimbus.config.base import ConfigSection

Logger = Literal["tensorboard", "wandb", "mlflow"]


class WandbConfig(ConfigSection):
    project: str = "nimbus"
    """W&B project the run is logged to"""
    entity: str | None = None
    """W&B entity (user or team); null: your default entity"""
    mode: Literal["offline", "online"] = "offline"
    """offline: files under RUN_DIR/wandb, synced later with `wandb sync`; online: streamed (needs a login)"""


class MlflowConfig(ConfigSection):
    tracking_uri: str | None = None
    """MLflow tracking URI (http://…, sqlite:///…); null: sqlite:///RUN_DIR/mlflow.db, artifacts in RUN_DIR/mlartifacts"""
    experiment: str = "nimbus"
    """MLflow experiment the run is logged to (created when missing)"""
