"""The ``stellaris:`` config section: asynchronous learner functions and how their gradients aggregate.

Read only when ``train.workflow: async_learners`` (stellaris/workflow.py, docs/stellaris.md). The
defaults are the paper's (Stellaris §VIII-A): rule ``stellaris``, d 0.96, v 3, IS truncation at ρ 1.0.
``rule`` is the ablation's one line: ``stellaris | stellaris_code | sync | softsync | ssp | async``.

Example (YAML)::

    train: {workflow: async_learners}
    stellaris: {rule: stellaris, learners: 3, decay: 0.96}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nimbus.config.base import ConfigSection


class StellarisConfig(ConfigSection):
    rule: Literal["stellaris", "stellaris_code", "sync", "softsync", "ssp", "async"] = "stellaris"
    """gradient aggregation rule (stellaris/rules.py)"""
    learners: int = Field(default=3, ge=1)
    """learner functions in flight at once (the paper runs 4 per GPU)"""
    decay: float = Field(default=0.96, gt=0, le=1)
    """d in β_k = δmax · d^k (stellaris, stellaris_code)"""
    root: int = Field(default=3, ge=1)
    """v in the per-gradient scale 1/δ^(1/v)"""
    softsync_k: int = Field(default=2, ge=1)
    """softsync: aggregate every k gradients"""
    ssp_bound: int = Field(default=1, ge=0)
    """ssp: a learner slot this many applied gradients ahead of the slowest waits"""
    max_queue: int | None = Field(default=None, ge=1)
    """stellaris: the queue sheds its stalest gradient beyond this length (null: 2 × learners)"""
    truncation: Literal["paper", "paper_ratio", "code", "none"] | None = None
    """IS truncation across learners (algos/truncation.py): paper (Eq. 2 as a weight R/r on PPO's clipped
    surrogate, PPO's clip kept), paper_ratio (R in place of PPO's ratio: the upper clip never acts at ρ ≤ 1 + ε),
    code (the authors' form, exact), none; null: code for stellaris_code, paper for every other rule"""
    rho: float = Field(default=1.0, gt=0)
    """ρ, the truncation's clip threshold"""

    def truncation_form(self) -> str:
        if self.truncation is not None:
            return self.truncation
        return "code" if self.rule == "stellaris_code" else "paper"
