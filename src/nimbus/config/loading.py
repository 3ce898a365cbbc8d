"""YAML and ``--set`` overrides in, a validated ``NimbusConfig`` out; every error names its key path.

Example::

    config = load_config(path=Path("configs/ppo-cartpole.yaml"), overrides=["train.total_env_steps=20000"])
    config.algo.lr, config.actors.scaling.kind
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from nimbus.config.renamed import renamed_config, renamed_path
from nimbus.config.root import NimbusConfig
from nimbus.config.yaml_loader import parse_yaml
from nimbus.errors import ConfigError
from nimbus.nitro.config import ScalingConfig


def _union_tags() -> set[str]:
    """Discriminator values pydantic inserts into error locations of tagged unions (dropped for users): the
    scaler kinds of ``actors.scaling`` (``algo`` is picked by name before validation, config/algo.py)."""
    inner = ScalingConfig.__args__[0]
    return {str(member.model_fields["kind"].default) for member in inner.__args__}


def format_validation_error(error: ValidationError) -> str:
    """One line per problem: ``key.path: message``."""
    tags = _union_tags()
    lines = []
    for item in error.errors():
        loc = [str(part) for i, part in enumerate(item["loc"])
               if not (i > 0 and isinstance(part, str) and part in tags)]
        path = ".".join(loc) or "<root>"
        message = item["msg"].replace("Extra inputs are not permitted", "unknown key")
        lines.append(f"{path}: {message}")
    return "\n".join(lines)


def apply_overrides(*, data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (values parsed as YAML) to a nested dict, returning a copy. Old section keys,
    in ``data`` or in a path, are renamed first (config/renamed.py), so a path by the new name also overrides a
    resumed run's section saved under its old name."""
    result = renamed_config(data=copy.deepcopy(data) or {})
    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"override {override!r}: expected key.path=value")
        path, raw = override.split("=", 1)
        path = renamed_path(path=path)
        keys = path.strip().split(".")
        node = result
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{path}: {key!r} is not a section")
            node = child
        node[keys[-1]] = parse_yaml(text=raw, source=f"--set {path}")
    return result


# old top-level key -> its name now (the folder and the paper say MARLess; old configs and resumed runs say marl)
RENAMED_SECTIONS = {"marl": "marless"}


def parse_config(*, data: dict[str, Any]) -> NimbusConfig:
    for old, new in RENAMED_SECTIONS.items():
        if old in data:
            raise ConfigError(f"{old}: this section is now called {new}: (the same keys; "
                              f"--set {new}.<key>=... on the command line)")
    try:
        return NimbusConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("invalid config:\n" + format_validation_error(exc)) from None


def load_config(*, path: Path, overrides: list[str] | None = None) -> NimbusConfig:
    """Read, override and validate a YAML config. Raises ConfigError naming the key path."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    data = parse_yaml(text=text, source=str(path))   # bounded: no alias bomb, no 1.1 "3e-4" strings
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return parse_config(data=apply_overrides(data=data, overrides=overrides or []))


def dump_config(*, config: NimbusConfig) -> str:
    """The resolved config as YAML (every default spelled out), as saved with a run."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


