"""The ``simulation:`` section: how long simulated invocations take (``runtime.backend: simulated``, docs/simulated.md).

Per function kind (a FunctionSpec's ``kind``: the function roles ``actor``, ``learner``, ``gradient_learner``,
``parameter``, ``critic``, ``postprocess``, MARLess's ``policy``, and ``probe``, ``system``) a
``DurationModel``; a kind not listed uses ``default``. One attempt's simulated duration is

    (median_s + per_row_s × rows) × noise × (straggler_factor with probability straggler_fraction, else 1)
        + first_call_s on a worker's first attempt + bytes / bandwidth

where ``noise`` is 1 (``distribution: constant``) or ``exp(sigma × N(0, 1))`` (``distribution: lognormal``: the
compute term is lognormal with median ``median_s + per_row_s × rows``), ``rows`` the largest leading dimension of
the request's and the result's arrays and ``bytes`` the encoded request plus result. A cold start (a new simulated
worker) takes ``cold_start_s`` first; with probability ``failure_fraction`` an attempt dies (its reply is lost) and
is retried.

``hardware``: a YAML file describing the simulated cluster relative to the profiled machine: per-kind
``speedup`` (durations and per-row times divided by it) and a ``bandwidth_bytes_per_s`` for every kind whose
model names none. How many functions run at once stays ``runtime.capacity_cpus`` and the functions' resources,
and their prices are cost/pricing.yaml's.

``profile``: a YAML file (``nimbus simulate fit <run_dir>`` writes one from a real run's ledger) whose
``functions`` mapping holds DurationModels; the kinds given here under ``functions`` win over the file's. The
file is read and validated when the config is loaded, so a malformed profile exits 2 naming its key.

Example::

    simulation:
      seed: 0
      profile: runs/ppo-real/simulation-profile.yaml
      functions:
        actor: {distribution: lognormal, median_s: 0.4, sigma: 0.3, cold_start_s: 1.5,
                straggler_fraction: 0.05, straggler_factor: 4.0, failure_fraction: 0.01}
        learner: {median_s: 0.8, per_row_s: 0.0001}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from nimbus.config.yaml_loader import parse_yaml
from nimbus.errors import ConfigError
from nimbus.schema.base import ConfigSection

# Every FunctionSpec kind: the config's function roles (sections.py ROLES, a test keeps them in step) and probe, system
Kind = Literal["actor", "learner", "gradient_learner", "parameter", "critic", "postprocess", "policy", "probe",
               "system"]
KINDS: tuple[str, ...] = get_args(Kind)


class DurationModel(ConfigSection):
    distribution: Literal["constant", "lognormal"] = "constant"
    """constant: every attempt takes median_s; lognormal: exp(N(log median_s, sigma²)) seconds"""
    median_s: float = Field(default=1.0, gt=0)
    """the duration at 0 rows (constant) or its lognormal median, in simulated seconds"""
    sigma: float = Field(default=0.0, ge=0, le=5)
    """lognormal only: the standard deviation of the log of the compute term (median_s + per_row_s × rows)"""
    per_row_s: float = Field(default=0.0, ge=0)
    """seconds added to the compute term per row (the largest leading dimension of the request's and result's arrays)"""
    first_call_s: float = Field(default=0.0, ge=0)
    """seconds added to a worker's first attempt only (its warm-up: first env reset, first torch call)"""
    bandwidth_bytes_per_s: float | None = Field(default=None, gt=0)
    """the request's and the result's encoded bytes cross this link (None: transfers take no time)"""
    cold_start_s: float = Field(default=1.0, ge=0)
    """a new worker's start (process + imports) before its first attempt; billed as init_s"""
    straggler_fraction: float = Field(default=0.0, ge=0, le=1)
    """the share of attempts whose compute term is multiplied by straggler_factor"""
    straggler_factor: float = Field(default=1.0, ge=1)
    """how much slower a straggler is"""
    failure_fraction: float = Field(default=0.0, ge=0, lt=1)
    """the share of attempts that die (the function ran, its reply is lost); each is retried per max_retries"""

    @model_validator(mode="after")
    def _sigma_needs_lognormal(self) -> DurationModel:
        if self.distribution == "constant" and self.sigma > 0:
            raise ValueError("sigma: needs distribution: lognormal (a constant duration has no spread)")
        return self


class ProfileFile(ConfigSection):
    """What ``nimbus simulate fit`` writes and ``simulation.profile`` reads."""

    version: int = Field(default=1, ge=1, le=1)
    source: str = ""
    """the run directory (ledger) it was fitted from"""
    functions: dict[Kind, DurationModel] = \
        Field(default_factory=dict)
    """one duration model per function kind"""


class HardwareFile(ConfigSection):
    """The simulated cluster relative to the machine a profile was measured on (``simulation.hardware``)."""

    version: int = Field(default=1, ge=1, le=1)
    description: str = ""
    """what it describes, e.g. Lambda actors at 1 vCPU, learners on V100s, 10 Gb/s"""
    speedup: dict[Kind, float] = Field(default_factory=dict)
    """per kind: how many times faster than the profiled machine (median_s and per_row_s are divided by it)"""
    bandwidth_bytes_per_s: float | None = Field(default=None, gt=0)
    """the network between functions, for every kind whose model names no bandwidth"""

    @field_validator("speedup")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        for kind, factor in value.items():
            if not factor > 0:
                raise ValueError(f"{kind}: a speedup must be > 0, got {factor}")
        return value

    def apply(self, *, kind: str, model: DurationModel) -> DurationModel:
        factor = self.speedup.get(kind, 1.0)
        return model.model_copy(update={"median_s": model.median_s / factor, "per_row_s": model.per_row_s / factor,
                                        "bandwidth_bytes_per_s": model.bandwidth_bytes_per_s or
                                        self.bandwidth_bytes_per_s})


def _load(*, path: Path, model: type[ConfigSection], what: str) -> Any:
    """Read and validate a YAML file as ``model``; ValueError naming the file and the key on anything malformed."""
    try:
        data = parse_yaml(text=Path(path).read_text(encoding="utf-8"), source=str(path))   # 1.25e9 is a number
    except (OSError, ConfigError) as exc:
        raise ValueError(f"cannot read the {what}: {exc}") from None
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "<root>"
        raise ValueError(f"{path}: {key}: {first['msg']}") from None


def load_profile(*, path: Path) -> ProfileFile:
    """Read and validate a profile file (``nimbus simulate fit`` writes them)."""
    return _load(path=path, model=ProfileFile, what="profile")


def load_hardware(*, path: Path) -> HardwareFile:
    """Read and validate a hardware description file."""
    return _load(path=path, model=HardwareFile, what="hardware description")


class SimulationConfig(ConfigSection):
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    """seeds the duration, straggler and failure draws (with the run's seed): same seeds, same simulated run"""
    profile: str | None = None
    """a profile YAML (``nimbus simulate fit``); its kinds are used unless ``functions`` names them too"""
    functions: dict[Kind, DurationModel] = \
        Field(default_factory=dict)
    """duration model per function kind (actor, learner, gradient_learner, parameter, critic, postprocess, policy,
    probe, system)"""
    default: DurationModel = Field(default_factory=DurationModel)
    """the duration model of a kind neither functions nor the profile names"""
    hardware: str | None = None
    """a hardware description YAML: per-kind speedups over the profiled machine and the network's bandwidth"""

    @field_validator("profile", "hardware")
    @classmethod
    def _file_readable(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Read the named file now: a ValueError from its loader names simulation.profile / .hardware."""
        if value is not None:
            (load_profile if info.field_name == "profile" else load_hardware)(path=Path(value))
        return value

    def models(self) -> dict[str, DurationModel]:
        """Kind → DurationModel: the profile's, then ``functions`` over it, then the hardware file applied to every
        kind (the files are read again here)."""
        loaded = load_profile(path=Path(self.profile)).functions if self.profile is not None else {}
        merged = {**loaded, **self.functions}
        if self.hardware is None:
            return merged
        hardware = load_hardware(path=Path(self.hardware))
        return {kind: hardware.apply(kind=kind, model=merged.get(kind, self.default)) for kind in KINDS}

    def named_kinds(self) -> set[str]:
        """The kinds the profile or ``functions`` names (the others take ``default``)."""
        loaded = load_profile(path=Path(self.profile)).functions if self.profile is not None else {}
        return {*loaded, *self.functions}

    def model_for(self, *, kind: str, models: dict[str, DurationModel]) -> DurationModel:
        return models.get(kind, self.default)


SIMULATED_WORKFLOWS = ("onpolicy", "offpolicy", "stellaris", "marless")   # a new workflow is refused until it
# waits on the runtime's event queue and reads the runtime's clock (runtime/base.py event_queue, runtime_clock)


def check_simulated(*, config: Any) -> None:
    """``runtime.backend: simulated`` runs what only the driver's thread and the virtual clock drive: the onpolicy,
    offpolicy, stellaris and marless workflows, populations (``policies``, ``pbt``: run/members.py drives the
    members on the runtime's event queue and clock) and several workloads on one pool (run/workloads.py); no
    pipelines (real polling threads). The pre-warm monitor runs: its trigger is a timer on
    the virtual clock (runtime/prewarm.py). The on-demand device pool runs as ``devices.cpu_slots`` simulated
    devices (runtime/simulated_pool.py), so ``devices.kind: cuda`` is refused. Raises ValueError naming the key
    that conflicts."""
    if config.runtime.backend != "simulated":
        return
    refused = [
        ("train.workflow", config.train.workflow not in SIMULATED_WORKFLOWS,
         f"{config.train.workflow!r} is not simulated (simulated: {', '.join(SIMULATED_WORKFLOWS)})"),
        ("devices.kind", config.devices.pool != "none" and config.devices.kind == "cuda",
         "the simulated device pool has devices.cpu_slots devices and its functions compute on the CPU"),
        ("pipeline", config.pipeline.minibatch or config.pipeline.dual_stage or config.pipeline.loader,
         "pipelines poll in real time"),
        ("actors.preregister", bool(config.actors.preregister), "pre-registration is not simulated"),
    ]
    for key, bad, why in refused:
        if bad:
            raise ValueError(f"{key}: {why} with runtime.backend: simulated (docs/simulated.md)")
