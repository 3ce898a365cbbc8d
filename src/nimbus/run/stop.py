"""Why a run stops: the stop rules every workflow shares, checked after each round (and by offpolicy after every event).

Example::

    reason = stop_reason(config=config, progress=workflow.progress)   # "max_rounds", ..., or None: go on
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from nimbus.config import NimbusConfig
from nimbus.nitro.scaler import BUDGET_STOP_KEY
from nimbus.types import Progress

SIGNALS = ("SIGINT", "SIGTERM")   # the reasons a signal gives: no final evaluation after them
log = logging.getLogger(__name__)


def stop_reason(*, config: NimbusConfig, progress: Progress) -> str | None:
    """The first stop rule the progress meets, or None."""
    if progress.last_row is not None and progress.last_row.extras.get(BUDGET_STOP_KEY) == 1.0:
        return "budget_spent"   # Nitro with on_budget: stop (the paper ends training when the budget is spent)
    if progress.env_steps >= config.train.total_env_steps:
        return "total_env_steps"
    if config.train.max_rounds is not None and progress.rounds >= config.train.max_rounds:
        return "max_rounds"
    target = config.train.target_return
    if target is not None and len(progress.recent_returns) >= config.train.return_window \
            and float(np.mean(progress.recent_returns)) >= target:
        return "target_return"
    target_eval = config.train.target_eval_return
    if target_eval is not None and progress.eval_return is not None and progress.eval_return >= target_eval:
        return "target_eval_return"
    return None


def say_nothing_to_train(*, run_dir: Path, reason: str, progress: Progress) -> None:
    """A resumed run whose checkpoint already meets the stop rule ``reason``: say that it trains nothing, and the
    limit to raise to train longer."""
    longer = {"max_rounds": f"--set train.max_rounds={2 * progress.rounds}",
              "total_env_steps": f"--set train.total_env_steps={2 * progress.env_steps}"}.get(reason, "another limit")
    log.warning("%s already stopped (%s: %d rounds, %d env steps); nothing to train. To train longer, resume with %s",
                run_dir, reason, progress.rounds, progress.env_steps, longer)
