"""The ``stellaris:`` config section: asynchronous learner functions and how their gradients aggregate.

Read only when ``train.workflow: stellaris`` (stellaris/workflow.py, docs/stellaris.md). The
defaults are the paper's (Stellaris §VIII-A): rule ``stellaris``, d 0.96, v 3, IS truncation at ρ 1.0.
``rule`` is the ablation's one line: ``stellaris | stellaris_code | sync | softsync | ssp | async``.

Example (YAML)::

    train: {workflow: stellaris}
    stellaris: {rule: stellaris, learners: 3, decay: 0.96}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from nimbus.schema.base import ConfigSection

# the IS truncation forms of algos/truncation.py, and none (off)
TruncationForm = Literal["paper", "paper_ratio", "code", "none"]


class StragglersConfig(ConfigSection):
    """A benchmark aid, not a technique: the chosen learner slots compute ``factor`` times slower (each of their
    learner functions sleeps (factor − 1) × its compute time before putting its gradient), so their gradients
    land staler, as on the paper's heterogeneous, contended GPUs."""

    learners: tuple[int, ...] = ()
    """learner slots (0 … stellaris.learners − 1) made slow"""
    factor: float = Field(default=1.0, ge=1.0)
    """how many times slower those slots compute (1: not slowed)"""


class StellarisConfig(ConfigSection):
    rule: Literal["stellaris", "stellaris_code", "sync", "softsync", "ssp", "async"] = "stellaris"
    """gradient aggregation rule (stellaris/rules.py)"""
    learners: int = Field(default=3, ge=1)
    """the most learner functions in flight at once (a cap: how many a round launches follows its rows and
    slice_rows; the paper runs 4 per GPU)"""
    slice_rows: int | None = Field(default=None, ge=1)
    """rows of a learner slice: each slice of the filling buffer is learned by its own learner functions (one per
    pass: PPO's num_epochs, IMPACT's circular_buffer_replays) as soon as it is full (null: PPO's
    algo.minibatch_size; IMPACT: ⌈env columns of a round / learners⌉ columns; IMPACT needs a multiple of
    algo.rollout_length)"""
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
    truncation: TruncationForm | None = None
    """IS truncation across learners (algos/truncation.py): paper (Eq. 2 as a weight R/r on PPO's clipped
    surrogate, PPO's clip kept), paper_ratio (R in place of PPO's ratio: the upper clip never acts at ρ ≤ 1 + ε),
    code (the authors' form, exact), none; null: code for stellaris_code, paper for every other rule"""
    rho: float = Field(default=1.0, gt=0)
    """ρ, the truncation's clip threshold"""
    resident_parameter: bool = True
    """keep the parameter function's model and optimizer in its worker across aggregations and publish only
    weights (the optimizer state for checkpoints); false: every aggregation publishes the full state
    (stellaris/resident.py, docs/stellaris.md)"""
    gather_arrivals: bool = False
    """stellaris and stellaris_code: a learner's slot frees when its gradient lands, and the gradients that landed
    while the parameter function ran join the queue together when it returns, one decision over the queue (fresher
    gradients at many learners, fewer optimizer steps per env step); false (and the other rules): the slot is held
    until the rule has taken its gradient, one decision per gradient (docs/stellaris.md)"""
    stragglers: StragglersConfig = Field(default_factory=StragglersConfig)
    """benchmark aid: slow chosen learner slots by a factor (docs/stellaris.md, "Stragglers")"""

    @model_validator(mode="after")
    def _check_stragglers(self) -> StellarisConfig:
        outside = [slot for slot in self.stragglers.learners if not 0 <= slot < self.learners]
        if outside:
            raise ValueError(f"stragglers.learners: slots {outside} are not learner slots 0 … {self.learners - 1} "
                             f"(stellaris.learners is {self.learners})")
        return self

    def slowdown(self, *, slot: int) -> float:
        """How many times slower learner slot ``slot`` computes (stragglers)."""
        return self.stragglers.factor if slot in self.stragglers.learners else 1.0

    def truncation_form(self) -> TruncationForm:
        if self.truncation is not None:
            return self.truncation
        return "code" if self.rule == "stellaris_code" else "paper"
