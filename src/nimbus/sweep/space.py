"""A sweep's search space: a YAML file mapping config key paths to distributions, checked before any trial.

    algo.lr: {float: [1.0e-4, 3.0e-3], log: true}      # float in [low, high], log scale
    algo.clip_coef: {float: [0.1, 0.3]}
    algo.update_epochs: {int: [2, 10], step: 2}         # int in [low, high]
    actors.num_actors: {int: [2, 8]}
    algo.hidden_sizes: {choice: [[64, 64], [128, 128]]}  # one of these values (any YAML value)

Each key must be a config key: the base config with each end of its range (each choice) applied must validate,
or the sweep exits 2 naming ``space.<key>`` before anything runs. The sweep places every trial's runs and names
them itself, so ``seed``, ``name`` and ``output.*`` are not space keys. The file is read by the configs' guarded
YAML loader (config/yaml_loader.py: no alias bombs; ``1e-4`` is a number).

Example::

    space = load_space(path=Path("space.yaml"), base=config_data)
    overrides = space.sample(trial=optuna_trial)            # {"algo.lr": 0.0007, ...}
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nimbus.config import parse_config
from nimbus.config.yaml_loader import parse_yaml
from nimbus.errors import ConfigError

SWEEP_SETS = ("seed", "name", "output")   # the sweep sets these for every trial (seeds, run names, where runs go)


@dataclass(frozen=True)
class Dimension:
    """One key's distribution: ``float``/``int`` in [low, high] (``log``, ``step``), or a ``choice`` of values."""

    key: str
    kind: str                      # float | int | choice
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] = ()

    def ends(self) -> list[Any]:
        """The values a check applies: both ends of a range, every choice."""
        return list(self.choices) if self.kind == "choice" else [self.low, self.high]

    def suggest(self, *, trial: Any) -> Any:
        if self.kind == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log, step=self.step)
        if self.kind == "int":
            return trial.suggest_int(self.key, self.low, self.high, log=self.log, step=self.step or 1)
        index = trial.suggest_categorical(self.key, list(range(len(self.choices))))   # any YAML value, by index
        return self.choices[index]


@dataclass(frozen=True)
class Space:
    dimensions: tuple[Dimension, ...]

    def sample(self, *, trial: Any) -> dict[str, Any]:
        """Each key's value for this trial."""
        return {d.key: d.suggest(trial=trial) for d in self.dimensions}

    def values_of(self, *, params: dict[str, Any]) -> dict[str, Any]:
        """A finished trial's config values from its Optuna params (choices are stored by index)."""
        return {d.key: d.choices[params[d.key]] if d.kind == "choice" else params[d.key] for d in self.dimensions}


def with_values(*, base: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of the raw config mapping ``base`` with each dotted key set to its value."""
    data = copy.deepcopy(base)
    for key, value in values.items():
        node = data
        *sections, leaf = key.split(".")
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise ConfigError(f"space.{key}: {section!r} is not a section")
        node[leaf] = copy.deepcopy(value)
    return data


def _number(*, key: str, spec: dict[str, Any], kind: str) -> Dimension:
    bounds = spec[kind]
    number = int if kind == "int" else (int, float)
    if not (isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, number) and not isinstance(b, bool)
                                                                    and math.isfinite(b) for b in bounds)):
        raise ConfigError(f"space.{key}.{kind}: give [low, high] as two finite {kind}s, got {bounds!r}")
    low, high = bounds
    if not low < high:
        raise ConfigError(f"space.{key}.{kind}: low {low} must be below high {high}")
    log, step = spec.get("log", False), spec.get("step")
    if not isinstance(log, bool):
        raise ConfigError(f"space.{key}.log: true or false, got {log!r}")
    if log and low <= 0:
        raise ConfigError(f"space.{key}.log: a log scale needs low > 0, got {low}")
    if step is not None and (isinstance(step, bool) or not isinstance(step, number) or step <= 0 or log):
        raise ConfigError(f"space.{key}.step: a positive {kind} without log, got {step!r}")
    return Dimension(key=key, kind=kind, low=low, high=high, log=log, step=step)


def parse_dimension(*, key: str, spec: Any) -> Dimension:
    kinds = [k for k in ("float", "int", "choice") if isinstance(spec, dict) and k in spec]
    if len(kinds) != 1:
        raise ConfigError(f"space.{key}: give exactly one of float: [low, high], int: [low, high] or "
                          f"choice: [values], got {spec!r}")
    allowed = {"float": {"float", "log", "step"}, "int": {"int", "log", "step"}, "choice": {"choice"}}[kinds[0]]
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ConfigError(f"space.{key}: unknown keys {unknown} for a {kinds[0]} dimension")
    if kinds[0] != "choice":
        return _number(key=key, spec=spec, kind=kinds[0])
    if not isinstance(spec["choice"], list) or len(spec["choice"]) < 2:
        raise ConfigError(f"space.{key}.choice: a list of at least two values, got {spec['choice']!r}")
    return Dimension(key=key, kind="choice", choices=tuple(spec["choice"]))


def parse_space(*, data: Any, base: dict[str, Any]) -> Space:
    """The space in ``data``, each dimension checked against the ``base`` config (its raw YAML mapping)."""
    if not isinstance(data, dict) or not data:
        raise ConfigError("space: a mapping of config key paths to distributions, e.g. algo.lr: {float: [1e-4, 1e-2]}")
    dimensions = tuple(parse_dimension(key=str(key), spec=spec) for key, spec in data.items())
    for dimension in dimensions:
        if dimension.key.split(".")[0] in SWEEP_SETS:
            raise ConfigError(f"space.{dimension.key}: the sweep sets seed, name and output itself (--seeds; "
                              "every trial's runs go under SWEEP_DIR/trials)")
        for value in dimension.ends():
            try:
                parse_config(data=with_values(base=base, values={dimension.key: value}))
            except ConfigError as exc:
                raise ConfigError(f"space.{dimension.key}: the value {value!r} makes the config invalid: {exc}") \
                    from None
    return Space(dimensions=dimensions)


def load_space(*, path: Path, base: dict[str, Any]) -> Space:
    if not Path(path).exists():
        raise ConfigError(f"{path}: no such space file")
    return parse_space(data=parse_yaml(text=Path(path).read_text(), source=str(path)), base=base)
