"""Pricing: turn ledger records into dollars, and price the serverful equivalent of a run.

The prices live in ``pricing.yaml`` (package data; pass ``path`` to use another file). A file is
validated when loaded: unknown keys, missing keys, non-positive prices and references to undefined
instances raise ``ConfigError`` naming the key path.

* A CPU function (``gpus == 0``) costs ``memory_mb / 1024 x billed_s x cpu_usd_per_gb_s`` (Lambda
  bills memory; its CPU share follows memory, so ``cpus`` is not priced separately).
* A GPU function costs ``gpus x gpu_instance.usd_per_hour x billed_s / 3600`` (gpus 0.25 = a quarter
  of a V100, Stellaris's 4 learners per GPU); its memory is part of the instance.
* Provisioned capacity (pre-warmed and pre-registered workers, Lambda's provisioned concurrency): a CPU
  worker's provisioned time (ledger records ``"prewarm"`` with ``provisioned`` and not ``cold``) costs
  ``memory_mb / 1024 x billed_s x provisioned_usd_per_gb_s`` whether it works or idles, and each attempt it
  runs ``memory_mb / 1024 x billed_s x provisioned_duration_usd_per_gb_s`` (lower than the on-demand rate). A
  provisioned GPU worker holds its GPU share all along: its provisioned time costs the GPU rate and its
  attempts nothing more. Its start (``"prewarm"``, ``cold``) is billed as any cold start's init.
* Excluding cold starts and provisioned idle time (``cost_excl_cold_usd``, the papers' model: Stellaris §VIII-A
  bills function seconds with pre-warm and keep-alive excluded): each attempt is priced for its billed seconds
  less its cold start's ``init_s`` (never below its ``duration_s``), at the rate its worker pays while busy
  (on demand; on a provisioned CPU worker the provisioned rate plus the duration rate; a GPU worker its GPU
  share); ``"prewarm"`` records (pre-warmed workers' starts, provisioned stretches) cost nothing. So
  ``cost_usd - cost_excl_cold_usd`` is the price of the cold starts plus the provisioned workers' idle time.
* Serverful baseline: instances reserved for the whole wall time of the run:
  ``ceil(peak_learner_gpus / learner_instance.gpus)`` learner instances (none without GPUs) plus
  ``ceil(peak_actor_cpus / actor_instance.vcpus)`` actor instances.

Example::

    pricing = load_pricing()
    usd = sum(pricing.cost_usd(record=r) for r in ledger.records())
    by_kind = pricing.cost_breakdown(records=ledger.records())   # {"actor": 0.0012, "learner": 0.04}
    warm = pricing.total_cost_usd(records=ledger.records(), excl_cold=True)   # without cold starts and idle time
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nimbus.config.yaml_loader import parse_yaml
from nimbus.cost.ledger import LedgerRecord
from nimbus.errors import ConfigError

_STRICT = ConfigDict(extra="forbid", frozen=True)


class InstancePrice(BaseModel):
    model_config = _STRICT
    usd_per_hour: float = Field(gt=0)
    vcpus: int = Field(gt=0)
    gpus: int = Field(ge=0)


class ServerlessPrices(BaseModel):
    model_config = _STRICT
    cpu_usd_per_gb_s: float = Field(gt=0)
    gpu_instance: str
    provisioned_usd_per_gb_s: float = Field(default=0.0000041667, gt=0)            # Lambda, x86, us-east-1
    provisioned_duration_usd_per_gb_s: float = Field(default=0.0000097222, gt=0)


class ServerfulChoice(BaseModel):
    model_config = _STRICT
    learner_instance: str
    actor_instance: str


class PricingModel(BaseModel):
    """A validated pricing file. See the module docstring for the rules."""

    model_config = _STRICT
    version: int = Field(ge=1)
    sources: dict[str, str]
    serverless: ServerlessPrices
    instances: dict[str, InstancePrice]
    serverful: ServerfulChoice

    def cost_usd(self, *, record: LedgerRecord) -> float:
        """What one ledger record costs (module docstring)."""
        stretch = record.provisioned and record.outcome == "prewarm" and not record.cold
        attempt_on_provisioned = record.provisioned and record.outcome != "prewarm"
        if record.gpus > 0:
            gpu = self.instances[self.serverless.gpu_instance]
            held = 0.0 if attempt_on_provisioned else record.billed_s
            return record.gpus / gpu.gpus * gpu.usd_per_hour * held / 3600.0
        rate = self.serverless.cpu_usd_per_gb_s
        if stretch:
            rate = self.serverless.provisioned_usd_per_gb_s
        elif attempt_on_provisioned:
            rate = self.serverless.provisioned_duration_usd_per_gb_s
        return record.memory_mb / 1024.0 * record.billed_s * rate

    def cost_excl_cold_usd(self, *, record: LedgerRecord) -> float:
        """What one ledger record costs without cold starts and provisioned idle time (module docstring)."""
        if record.outcome == "prewarm":   # a pre-warmed worker's start, or a provisioned worker's time
            return 0.0
        busy_s = max(record.duration_s, record.billed_s - record.init_s) if record.cold else record.billed_s
        if record.gpus > 0:
            gpu = self.instances[self.serverless.gpu_instance]
            return record.gpus / gpu.gpus * gpu.usd_per_hour * busy_s / 3600.0
        rate = self.serverless.cpu_usd_per_gb_s
        if record.provisioned:
            rate = self.serverless.provisioned_usd_per_gb_s + self.serverless.provisioned_duration_usd_per_gb_s
        return record.memory_mb / 1024.0 * busy_s * rate

    def cost_breakdown(self, *, records: Iterable[LedgerRecord], excl_cold: bool = False) -> dict[str, float]:
        """Dollars per function kind (actor, learner, parameter, ...); ``excl_cold``: without cold starts and
        provisioned idle time (``cost_excl_cold_usd``)."""
        price = self.cost_excl_cold_usd if excl_cold else self.cost_usd
        out: dict[str, float] = {}
        for record in records:
            out[record.kind] = out.get(record.kind, 0.0) + price(record=record)
        return out

    def total_cost_usd(self, *, records: Iterable[LedgerRecord], excl_cold: bool = False) -> float:
        return sum(self.cost_breakdown(records=records, excl_cold=excl_cold).values())

    def serverful_cost_usd(self, *, wall_s: float, peak_actor_cpus: float, peak_learner_gpus: float) -> float:
        """Reserved instances for the whole run, sized for its peaks (module docstring)."""
        learner = self.instances[self.serverful.learner_instance]
        actor = self.instances[self.serverful.actor_instance]
        n_learner = math.ceil(peak_learner_gpus / learner.gpus) if peak_learner_gpus > 0 else 0
        n_actor = math.ceil(peak_actor_cpus / actor.vcpus) if peak_actor_cpus > 0 else 0
        hourly = n_learner * learner.usd_per_hour + n_actor * actor.usd_per_hour
        return hourly * wall_s / 3600.0


def _check_references(*, model: PricingModel, where: str) -> None:
    refs = {
        "serverless.gpu_instance": (model.serverless.gpu_instance, True),
        "serverful.learner_instance": (model.serverful.learner_instance, True),
        "serverful.actor_instance": (model.serverful.actor_instance, False),
    }
    for key, (name, needs_gpu) in refs.items():
        if name not in model.instances:
            raise ConfigError(f"{where}: {key}: instance {name!r} is not defined under 'instances'")
        if needs_gpu and model.instances[name].gpus < 1:
            raise ConfigError(f"{where}: {key}: instance {name!r} has no GPU")


def load_pricing(*, path: Path | None = None) -> PricingModel:
    """Load and validate a pricing file (default: the packaged ``pricing.yaml``)."""
    if path is None:
        text = resources.files("nimbus.cost").joinpath("pricing.yaml").read_text(encoding="utf-8")
        where = "pricing.yaml (packaged)"
    else:
        text = Path(path).read_text(encoding="utf-8")
        where = str(path)
    data = parse_yaml(text=text, source=where)   # the configs' guarded loader: no alias bomb, ConfigError naming it
    try:
        model = PricingModel.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "<root>"
        raise ConfigError(f"{where}: {key}: {first['msg']}") from exc
    _check_references(model=model, where=where)
    return model
