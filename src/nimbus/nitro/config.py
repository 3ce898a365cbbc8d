"""Actor-scaling configs (frozen, unknown keys rejected); policy/scaling.py ``make_scaler`` turns one into a scaler.

The section is a discriminated union on ``kind``; one config line switches the scaler::

    scaling: {kind: nitro, min_actors: 8, max_actors: 64, budget_usd: 5.0}
    scaling: {kind: hydrozoa, initial_actors: 8, max_actors: 64, double_every_rounds: 10}

    config = TypeAdapter(ScalingConfig).validate_python(section)
    scaler = make_scaler(config=config)
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from nimbus.schema.base import ConfigSection
from nimbus.schema.bounds import MAX_ACTORS


class _Frozen(ConfigSection):
    """Config models of this module: frozen, unknown keys and non-finite or boolean numbers refused."""


def _not_below(value: int, info: ValidationInfo, *, lower_field: str) -> int:
    """Validator body: ``value`` (the field being checked) must be >= the already-validated ``lower_field``."""
    lower = info.data.get(lower_field)
    if lower is not None and value < lower:
        raise ValueError(f"{info.field_name} ({value}) must be >= {lower_field} ({lower})")
    return value


class FixedScalingConfig(_Frozen):
    """A fixed number of actor functions every round."""

    kind: Literal["fixed"] = "fixed"
    """the scaler: fixed"""
    num_actors: int = Field(ge=1, le=MAX_ACTORS)
    """actor functions per round"""


class HessianProbeConfig(_Frozen):
    """How the trainer probes the Hessian each round (``nimbus.analysis.hessian.extreme_eigenvalues``)."""

    subset_size: int | None = Field(default=None, ge=1)
    """rows of the round's batch the objective is evaluated on (null: the whole batch; variant authors_code
    requires null). A subset adds its own noise to R (interquartile range 30-60 % of R at 256-2048 of 4096 rows,
    0 on the whole batch: docs/nitro.md)"""
    max_iterations: int = Field(default=100, ge=3)    # Lanczos steps (HVPs); ~100 is the authors' setting
    """Lanczos steps (Hessian-vector products); 100 is the authors' setting (authors_code runs exactly this many,
    at most one per parameter)"""
    tolerance: float = Field(default=1e-3, gt=0.0)
    """ARPACK relative accuracy of the extreme eigenvalues (paper variant; authors_code has no convergence test)"""


class NitroScalingConfig(_Frozen):
    """Nitro (paper 002, §5.3). ``variant="authors_code"`` reproduces the public code (nimbus implements the paper and
    offers the code's behaviour as a named option)."""

    kind: Literal["nitro"] = "nitro"
    """the scaler: nitro"""
    min_actors: int = Field(default=8, ge=1, le=MAX_ACTORS)
    """I_min: actors in a round without evidence for boosting"""
    max_actors: int = Field(default=64, ge=1, le=MAX_ACTORS)
    """I_max: actors in the most boostable round"""
    window: int = Field(default=6, ge=2)
    """n: the last n valid R values a round's score is ranked in (at least 2: one value has no spread)"""
    decay: float = Field(default=0.96, gt=0.0, le=1.0)
    """d: the score is multiplied by d^k at round k (1 turns the decay off, an ablation)"""
    budget_usd: float | None = Field(default=None, gt=0.0)
    """the run's budget in dollars (null: none)"""
    on_budget: Literal["stop", "min"] = "stop"
    """once the budget is spent: stop ends the run (the paper, §4), min goes on at min_actors"""
    variant: Literal["paper", "authors_code"] = "paper"
    """paper (§5.3), or authors_code: the public code's signal and arithmetic (docs/nitro.md)"""
    hessian: HessianProbeConfig = HessianProbeConfig()
    """how each round's Hessian is probed"""

    @field_validator("max_actors")
    @classmethod
    def _max_not_below_min(cls, value: int, info: ValidationInfo) -> int:
        return _not_below(value, info, lower_field="min_actors")

    @model_validator(mode="after")
    def _authors_code_probes_the_whole_batch(self) -> NitroScalingConfig:
        if self.variant == "authors_code" and self.hessian.subset_size is not None:
            raise ValueError("variant authors_code probes the whole round batch, as the authors' code does: "
                             f"hessian.subset_size must be null, got {self.hessian.subset_size}")
        return self


class HydrozoaScalingConfig(_Frozen):
    """Hydrozoa baseline: double the actors every ``double_every_rounds`` rounds, up to ``max_actors``."""

    kind: Literal["hydrozoa"] = "hydrozoa"
    """the scaler: hydrozoa"""
    initial_actors: int = Field(ge=1, le=MAX_ACTORS)
    """actors in round 0"""
    max_actors: int = Field(ge=1, le=MAX_ACTORS)
    """the most actors the doubling reaches"""
    double_every_rounds: int = Field(ge=1)
    """rounds between doublings"""

    @field_validator("max_actors")
    @classmethod
    def _max_not_below_initial(cls, value: int, info: ValidationInfo) -> int:
        return _not_below(value, info, lower_field="initial_actors")


class MaxScalingConfig(_Frozen):
    """Always ``max_actors`` actor functions (Nitro's upper-bound baseline)."""

    kind: Literal["max"] = "max"
    """the scaler: max"""
    max_actors: int = Field(ge=1, le=MAX_ACTORS)
    """actor functions every round"""


ScalingConfig = Annotated[
    FixedScalingConfig | NitroScalingConfig | HydrozoaScalingConfig | MaxScalingConfig,
    Field(discriminator="kind"),
]
