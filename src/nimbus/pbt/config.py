"""Config sections of a run that trains several policies: ``policies:`` (named policies with their own
hyperparameters) and ``pbt:`` (population-based training over generated members). Data only.

Example (YAML)::

    policies:                       # two policies in one run, each with its own Store keys and buffer
      - {name: fast, algo: {lr: 0.003}}
      - {name: slow, algo: {lr: 0.0003}}

    pbt:                            # or: P members with sampled hyperparameters (XingTian 5.1, Jaderberg 2017)
      members: 4
      interval_rounds: 5
      hyperparameters: {lr: {low: 1.0e-5, high: 1.0e-2, log: true}}
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from nimbus.schema.base import ConfigSection


class _Frozen(ConfigSection):
    """Config models of this module: frozen, unknown keys and non-finite or boolean numbers refused."""


class PolicyConfig(_Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """the policy's name: Store keys weights/<name>/<v>, its run directory policies/<name>/"""
    algo: dict[str, Any] = Field(default_factory=dict)
    """hyperparameters that differ from the run's algo section (keys of that algorithm only)"""


class MutationConfig(_Frozen):
    low: float
    """smallest value: initial draws, resampling and perturbation stay in [low, high]"""
    high: float
    """largest value"""
    log: bool = False
    """draw log-uniformly (learning rates) instead of uniformly"""

    @model_validator(mode="after")
    def _ordered(self) -> MutationConfig:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be < high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"log: true needs low > 0 (got {self.low})")
        return self


class PBTConfig(_Frozen):
    members: int = Field(default=4, ge=2)
    """population size P; member i is the policy member<i>"""
    interval_rounds: int = Field(default=5, ge=1)
    """a member is ranked (and may exploit) every this many of its rounds"""
    fraction: float = Field(default=0.25, gt=0, le=0.5)
    """bottom fraction that exploits a member of the top fraction (at least one member each)"""
    perturb_factors: tuple[float, float] = (0.8, 1.2)
    """explore: each hyperparameter is multiplied by one of these (then clipped into its range)"""
    resample_probability: float = Field(default=0.25, ge=0, le=1)
    """explore: probability of drawing a hyperparameter afresh from its range instead of perturbing it"""
    hyperparameters: dict[str, MutationConfig]
    """algo keys to sample, perturb and resample, with their ranges"""
    synchronous: bool = False
    """rank the population at once: a member that ends a ranking round waits until every member still training has
    ended it (XingTian's generations; Ray Tune's ``synch=True``), so which member exploits does not depend on how
    the members' rounds interleave. false: each member is ranked alone against the others' returns so far"""
    on_member_failure: Literal["replace", "stop"] = "replace"
    """a member whose function fails past its retries: re-seed it from a top member, or end the run"""


def check_population(*, algo: BaseModel, policies: list[PolicyConfig], pbt: PBTConfig | None,
                     workflow: str, pipelined: bool, exact_resume: bool) -> None:
    """Rules across sections (raised as ValueError naming the key path, so the CLI exits 2)."""
    if not policies and pbt is None:
        return
    if policies and pbt is not None:
        raise ValueError("policies and pbt are exclusive: pbt generates its members")
    if workflow != "onpolicy" or pipelined or exact_resume:
        raise ValueError("policies / pbt run the onpolicy workflow without pipelines or train.exact_resume")
    seen: set[str] = set()
    for i, policy in enumerate(policies):
        if policy.name in seen:
            raise ValueError(f"policies.{i}.name: duplicate policy name {policy.name!r}")
        seen.add(policy.name)
        for key, value in policy.algo.items():
            _check_algo_value(algo=algo, key=key, value=value, key_path=f"policies.{i}.algo.{key}",
                              value_path=f"policies.{i}.algo.{key}")
    if pbt is not None:
        for key, mutation in pbt.hyperparameters.items():
            for bound in ("low", "high"):
                _check_algo_value(algo=algo, key=key, value=getattr(mutation, bound),
                                  key_path=f"pbt.hyperparameters.{key}",
                                  value_path=f"pbt.hyperparameters.{key}.{bound}")


def _check_algo_value(*, algo: BaseModel, key: str, value: Any, key_path: str, value_path: str) -> None:
    """``key`` must be a field of the algorithm's config and ``value`` valid for it."""
    if key == "name" or key not in type(algo).model_fields:
        raise ValueError(f"{key_path}: {key!r} is not a hyperparameter of algo {getattr(algo, 'name', '?')}")
    current = getattr(algo, key)
    if isinstance(current, int) and not isinstance(current, bool) and isinstance(value, float) and value.is_integer():
        value = int(value)   # a range's bound of an integer key (members' values are rounded: pbt/population.py)
    try:
        type(algo).model_validate({**algo.model_dump(), key: value})
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        raise ValueError(f"{value_path}: {value!r} is outside the valid range of algo.{key} ({reason})") from None
