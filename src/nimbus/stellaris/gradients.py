"""What Stellaris's learner and parameter functions need to know of an algorithm: PPO and IMPACT.

``train.workflow: stellaris`` cuts each round's batch into gradient tasks, has learner functions
compute one gradient per task (stellaris/learner.py) and a parameter function step the
optimizer (stellaris/parameter.py). The parts that differ per algorithm live here:

* **slices** (stellaris/slices.py): the round's rows are cut into slices as actors deliver; each slice is
  learned ``passes`` times, one learner function per pass. PPO: a slice is ``algo.minibatch_size`` rows by
  default (its minibatch), learned ``num_epochs`` times; GAE is the driver's (``driver_postprocess``). IMPACT
  learns on time-major [T, B] batches, so a slice is whole env columns (``unit_rows`` = ``rollout_length``
  rows; V-trace needs the sequence), by default ⌈B / learners⌉ columns, learned ``circular_buffer_replays``
  (K) times — IMPACT's circular buffer with the round's batch as its one entry.
* **loss** on a task, with the cross-learner IS truncation (Eq. 2) on π/μ, and **log π(a|s)** of a peer
  policy for that truncation, in the loss's shape.
* **after each optimizer step**: IMPACT counts the step and refreshes its target network every
  ``target_update_interval`` steps (algos/impala/learner.py ``advance_target``). The target network is part
  of the model's state, so each published version carries the target it was trained against.

Example::

    gradient_algo = gradient_algo_for(name="impala")
    gradient_algo.default_slice_rows(config=cfg, batch_rows=512, learners=3)   # 6 columns of 32: 192
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from nimbus.algos.base import LossOutput
from nimbus.algos.impala.learner import advance_target
from nimbus.algos.impala.loss import batch_loss, time_major_log_prob
from nimbus.algos.impala.model import ImpalaModel
from nimbus.algos.ppo.learner import minibatch_loss, scheduled
from nimbus.algos.truncation import Truncation
from nimbus.models.mlp import PolicyValueModel


class GradientAlgo(Protocol):
    behaviour_key: str    # the batch column holding log μ(a|s)
    driver_postprocess: bool   # the driver post-processes rows once (PPO's GAE); else the learner (a layout)

    def unit_rows(self, *, config: Any) -> int: ...

    def passes(self, *, config: Any) -> int: ...

    def default_slice_rows(self, *, config: Any, batch_rows: int, learners: int) -> int: ...

    def positions(self, *, config: Any, rows: int) -> np.ndarray: ...

    def select(self, *, batch: dict[str, torch.Tensor], positions: torch.Tensor) -> dict[str, torch.Tensor]: ...

    def loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor], config: Any, progress: float,
             truncation: Truncation | None) -> LossOutput: ...

    def log_prob(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def learning_rate(self, *, config: Any, progress: float) -> float: ...

    def after_step(self, *, model: torch.nn.Module, config: Any) -> None: ...


class PPOGradients:
    """Rows of the post-processed (GAE) batch; PPO's loss with its scheduled clip; no state after a step."""

    behaviour_key = "log_prob"
    driver_postprocess = True

    def unit_rows(self, *, config: Any) -> int:
        return 1

    def passes(self, *, config: Any) -> int:
        return config.num_epochs

    def default_slice_rows(self, *, config: Any, batch_rows: int, learners: int) -> int:
        return min(config.minibatch_size, batch_rows)

    def positions(self, *, config: Any, rows: int) -> np.ndarray:
        return np.arange(rows)

    def select(self, *, batch: dict[str, torch.Tensor], positions: torch.Tensor) -> dict[str, torch.Tensor]:
        return {key: value[positions] for key, value in batch.items()}

    def loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor], config: Any, progress: float,
             truncation: Truncation | None) -> LossOutput:
        clip_coef = scheduled(value=config.clip_coef, schedule=config.clip_schedule, progress=progress)
        return minibatch_loss(model=_policy_value(model), batch=batch, config=config, clip_coef=clip_coef,
                              truncation=truncation)

    def log_prob(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        log_prob, _, _ = _policy_value(model).evaluate(batch["obs"], actions=batch["actions"])
        return log_prob

    def learning_rate(self, *, config: Any, progress: float) -> float:
        return scheduled(value=config.lr, schedule=config.lr_schedule, progress=progress)

    def after_step(self, *, model: torch.nn.Module, config: Any) -> None:
        return None


class ImpactGradients:
    """Whole env columns of the time-major batch; IMPACT's V-trace loss over its target network."""

    behaviour_key = "behaviour_log_prob"
    driver_postprocess = False

    def unit_rows(self, *, config: Any) -> int:
        return config.rollout_length

    def passes(self, *, config: Any) -> int:
        return config.circular_buffer_replays

    def default_slice_rows(self, *, config: Any, batch_rows: int, learners: int) -> int:
        columns = max(1, batch_rows // config.rollout_length)
        return -(-columns // max(1, min(learners, columns))) * config.rollout_length

    def positions(self, *, config: Any, rows: int) -> np.ndarray:
        return np.arange(rows // config.rollout_length)

    def select(self, *, batch: dict[str, torch.Tensor], positions: torch.Tensor) -> dict[str, torch.Tensor]:
        return {key: value[:, positions] for key, value in batch.items()}

    def loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor], config: Any, progress: float,
             truncation: Truncation | None) -> LossOutput:
        out = batch_loss(model=_impala(model), batch=batch, config=config, truncation=truncation)
        return LossOutput(loss=out.loss, stats=out.stats)

    def log_prob(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return time_major_log_prob(net=_impala(model).net, batch=batch)

    def learning_rate(self, *, config: Any, progress: float) -> float:
        return config.lr

    def after_step(self, *, model: torch.nn.Module, config: Any) -> None:
        advance_target(model=_impala(model), config=config)


def _policy_value(model: torch.nn.Module) -> PolicyValueModel:
    """PPO's model (its make_model builds a PolicyValueModel), typed as one."""
    if not isinstance(model, PolicyValueModel):
        raise TypeError(f"PPO's gradient needs a PolicyValueModel, got {type(model).__name__}")
    return model


def _impala(model: torch.nn.Module) -> ImpalaModel:
    """IMPACT's model (its make_model builds an ImpalaModel), typed as one."""
    if not isinstance(model, ImpalaModel):
        raise TypeError(f"IMPACT's gradient needs an ImpalaModel, got {type(model).__name__}")
    return model


GRADIENT_ALGOS: dict[str, GradientAlgo] = {"ppo": PPOGradients(), "impala": ImpactGradients()}


def gradient_algo_for(*, name: str) -> GradientAlgo:
    """The gradient-task parts of ``algo.name`` (the config rules admit only these to stellaris)."""
    return GRADIENT_ALGOS[name]
