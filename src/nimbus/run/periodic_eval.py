"""Periodic evaluation during training (``train.eval_every_env_steps``): SB3's EvalCallback for nimbus.

Every ``eval_every_env_steps`` env steps the trainer plays ``train.eval_episodes`` full episodes with the
newest published policy, in the driver, on a fresh env seeded ``seed + 20_000`` (the same episodes each
time, so evaluations compare across the run). ``train.eval_explore: false`` acts greedily (DQN without ε,
the mode of a PPO/SAC distribution; a multi-agent run plays every agent with its policy). The result lands in
the round row's extras (``eval/return_mean``, ``eval/return_std``, ``eval/policy_version`` or, multi-agent,
``eval/policy_version/<policy>``, ``eval/s``: metrics.jsonl and the trackers) and in ``Progress.eval_return``,
which ``train.target_eval_return`` stops on.

A population's members (``policies:``, ``pbt:``; run/members.py) each have a RoundHook and so an evaluator of
their own: a member is evaluated every ``eval_every_env_steps`` of its own env steps, on its own seed (run seed
+ i), in its own row (``policies/<name>/metrics.jsonl``, its trackers).

The driver is busy while it evaluates: the functions already running go on, but none is started. On the inline
runtime (functions on a thread of the driver's process) the evaluation holds the runtime's ``exclusive()``, so
no call runs meanwhile: both seed torch's global RNG. The evaluation is not a function invocation, so the
ledger does not bill it.

Example::

    evaluator = PeriodicEvaluator(config=config, env_steps=progress.env_steps, runtime=shared.runtime)
    scalars = evaluator.maybe_evaluate(evaluate=workflow.evaluate, progress=workflow.progress)
    row.extras.update(scalars)        # {} when no evaluation was due
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nimbus.config import NimbusConfig
from nimbus.roles.evaluate import EvalResult
from nimbus.runtime.base import DriverSide, between_calls
from nimbus.types import Progress

EVAL_SEED_OFFSET = 20_000   # periodic evaluations: seed + this (the final one uses seed + 10_000)


class PeriodicEvaluator:
    """Evaluates when the run's env steps cross the next multiple of ``train.eval_every_env_steps``."""

    def __init__(self, *, config: NimbusConfig, env_steps: int, runtime: Any = None) -> None:
        every = config.train.eval_every_env_steps
        if every is None:
            raise ValueError("PeriodicEvaluator needs train.eval_every_env_steps")
        # the runtime whose calls wait meanwhile (inline); without one, nothing runs in the driver's process
        self.config, self.every = config, every
        self.runtime = runtime if runtime is not None else DriverSide()
        self.next_at = self._mark_after(env_steps)   # a resumed run evaluates at the next multiple

    def maybe_evaluate(self, *, evaluate: Callable[..., EvalResult], progress: Progress) -> dict[str, float]:
        """Evaluate if due (``evaluate``: the workflow's, core.Workflow.evaluate, on its newest version); the
        scalars for the round row, or {} when no evaluation was due."""
        if progress.env_steps < self.next_at:
            return {}
        self.next_at = self._mark_after(progress.env_steps)   # a round that crossed several marks: one evaluation
        started = time.perf_counter()
        with between_calls(runtime=self.runtime):
            result = evaluate(episodes=self.config.train.eval_episodes, seed=self.config.seed + EVAL_SEED_OFFSET,
                              explore=self.config.train.eval_explore)
        progress.eval_return = result.mean_return
        return {"eval/return_mean": result.mean_return, "eval/return_std": result.std_return,
                **_versions(result=result), "eval/s": time.perf_counter() - started}

    def _mark_after(self, env_steps: int) -> int:
        """The first multiple of ``every`` above ``env_steps``."""
        return (env_steps // self.every + 1) * self.every


def _versions(*, result: Any) -> dict[str, float]:
    """``eval/policy_version``; a multi-agent evaluation (marless/evaluate.py) one per policy it played,
    ``eval/policy_version/<policy>``."""
    per_policy = getattr(result, "policy_versions", None)
    if per_policy is not None:
        return {f"eval/policy_version/{policy}": float(version) for policy, version in sorted(per_policy.items())}
    return {"eval/policy_version": float(result.policy_version)}
