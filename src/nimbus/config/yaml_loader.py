"""Config YAML, read safely: ``parse_yaml`` refuses what would expand without bound, before building it.

PyYAML's SafeLoader never runs code, but an alias (``*a``) repeats a whole subtree: nine lines of nine
aliases each are 9⁹ values in 542 bytes, which grew past 1.9 GB once the config was validated and dumped.
Here the document is composed into YAML nodes (each anchor once), its expanded size is counted with every
alias followed (memoised, so the count itself is cheap), and a document over ``MAX_CONFIG_VALUES`` values,
over ``MAX_CONFIG_BYTES`` bytes, recursive through an alias, or nested too deep is refused (ConfigError,
exit 2) before any Python object is built. Small anchors and merge keys (``<<: *base``) still work.

Numbers follow YAML 1.2: ``3e-4`` and ``1e30`` are floats (PyYAML's YAML 1.1 reads them as strings,
which the strict config models would refuse).

Example::

    parse_yaml(text=Path("configs/ppo-cartpole.yaml").read_text(), source="configs/ppo-cartpole.yaml")
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from nimbus.errors import ConfigError
from nimbus.schema.bounds import MAX_CONFIG_BYTES, MAX_CONFIG_VALUES

_IN_PROGRESS = -1


class ConfigLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 exponent floats (``1e-4``; 1.1 needs ``1.0e-4``)."""


ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def expanded_size(*, node: yaml.Node, source: str, memo: dict[int, int] | None = None, depth: int = 0) -> int:
    """Values ``node`` stands for once every alias is followed; ConfigError past the bounds."""
    memo = {} if memo is None else memo
    key = id(node)
    if memo.get(key) == _IN_PROGRESS:
        raise ConfigError(f"{source}: a YAML alias refers to a value that contains it (recursive); refused")
    if key in memo:
        return memo[key]
    if depth > 100:
        raise ConfigError(f"{source}: YAML nested more than 100 levels deep; refused")
    memo[key] = _IN_PROGRESS
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = []
    size = 1 + sum(expanded_size(node=child, source=source, memo=memo, depth=depth + 1) for child in children)
    if size > MAX_CONFIG_VALUES:
        raise ConfigError(f"{source}: expands to more than {MAX_CONFIG_VALUES:,} values (YAML aliases repeat "
                          "whole subtrees); refused")
    memo[key] = size
    return size


def parse_yaml(*, text: str, source: str) -> Any:
    """The YAML document in ``text`` as Python data; ConfigError (naming ``source``) for bad or unbounded YAML."""
    if len(text.encode()) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: {len(text.encode()):,} bytes of YAML; a config is at most "
                          f"{MAX_CONFIG_BYTES:,} bytes")
    loader = ConfigLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node=node, source=source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: YAML nested too deep; refused") from None
    finally:
        loader.dispose()
