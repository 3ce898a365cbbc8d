"""The old spellings of renamed config keys and values, still read so that old configs and runs keep working.

Each workflow is called by its folder's name: ``train.workflow: onpolicy | offpolicy | stellaris | marless``, and the
off-policy workflow's section is ``offpolicy:``. Configs, run directories and checkpoints written before say ``sync``,
``async``, ``async_learners``, ``multiagent`` and ``async_workflow:``: they still load, resume and evaluate, each old
spelling read as its new one with a warning that names the new one (docs/guide.md, "One name per workflow"). A
config that gives a key under both ``async_workflow:`` and ``offpolicy:`` with different values is refused, naming
both key paths.

Example::

    renamed_config(data={"train": {"workflow": "sync"}, "async_workflow": {"lockstep": True}}, warn=False)
    # {'train': {'workflow': 'onpolicy'}, 'offpolicy': {'lockstep': True}}
"""

from __future__ import annotations

import logging
from typing import Any

from nimbus.errors import ConfigError

log = logging.getLogger(__name__)

RENAMED_WORKFLOWS: dict[str, str] = {"sync": "onpolicy", "async": "offpolicy", "async_learners": "stellaris",
                                     "multiagent": "marless"}
"""``train.workflow``: each old value → its name now."""
RENAMED_KEYS: dict[str, str] = {"async_workflow": "offpolicy"}
"""Top-level sections: each old key → its name now."""


def workflow_value(value: Any, *, warn: bool = True) -> Any:
    """``value`` with an old ``train.workflow`` spelling replaced by its name now; any other value unchanged (the
    model's Literal reports it). ``warn``: log that the old name was read."""
    new = RENAMED_WORKFLOWS.get(value) if isinstance(value, str) else None
    if new is None:
        return value
    if warn:
        _deprecated(said=[f"train.workflow: {value} is now {new}"])
    return new


def renamed_path(*, path: str, warn: bool = True) -> str:
    """A ``--set`` key path with an old section key replaced by its name now (``async_workflow.lockstep`` →
    ``offpolicy.lockstep``)."""
    head, dot, rest = path.partition(".")
    new = RENAMED_KEYS.get(head.strip())
    if new is None:
        return path
    if warn:
        _deprecated(said=[f"--set {path.strip()} is now --set {new}{dot}{rest.strip()}"])
    return f"{new}{dot}{rest}"


def renamed_config(*, data: Any, warn: bool = True) -> Any:
    """A copy of ``data`` (a raw config mapping: YAML, a checkpoint's saved config) with each old key and value under
    its name now, and one warning naming them when ``warn``; anything but a dict comes back as it is. Raises
    ConfigError where an old section and its new name give one key different values."""
    if not isinstance(data, dict):
        return data
    result, said = dict(data), []
    for old, new in RENAMED_KEYS.items():
        if old in result:
            merged = _merged(old=old, new=new, old_value=result[old], new_value=result.get(new))
            placed: dict[Any, Any] = {}
            for key, value in result.items():   # the section keeps its place among the others
                if key in (old, new):
                    placed.setdefault(new, merged)
                else:
                    placed[key] = value
            result = placed
            said.append(f"{old}: is now {new}:")
    train = result.get("train")
    if isinstance(train, dict) and workflow_value(train.get("workflow"), warn=False) != train.get("workflow"):
        result["train"] = {**train, "workflow": workflow_value(train["workflow"], warn=False)}
        said.insert(0, f"train.workflow: {train['workflow']} is now {result['train']['workflow']}")
    if warn and said:
        _deprecated(said=said)
    return result


def _deprecated(*, said: list[str]) -> None:
    """The one warning for what one config, or one ``--set``, spelled the old way."""
    log.warning("deprecated names in the config, read as the new ones: %s. Write the new names (the old ones are "
                "still read)", "; ".join(said))


def _merged(*, old: str, new: str, old_value: Any, new_value: Any) -> Any:
    """The section given under both ``old`` and ``new``, as one; ConfigError where they disagree on a key."""
    if new_value is None:
        return old_value
    if not (isinstance(old_value, dict) and isinstance(new_value, dict)):
        if old_value == new_value:
            return new_value
        raise ConfigError(f"{old} and {new}: both given; {old} is the old name of {new}: keep one")
    for key in old_value.keys() & new_value.keys():
        if old_value[key] != new_value[key]:
            raise ConfigError(f"{old}.{key}: {old_value[key]!r}, but {new}.{key}: {new_value[key]!r}; {old} is the "
                              f"old name of {new}: keep one")
    return {**old_value, **new_value}
