"""config/renamed.py: the workflows' old names (``train.workflow: sync | async | async_learners | multiagent``, the
``async_workflow:`` section) still read as the new ones (onpolicy, offpolicy, stellaris, marless; ``offpolicy:``),
with one warning naming the new spelling; a key given under both section names with two values is refused."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from nimbus.config import apply_overrides, dump_config, load_config, parse_config
from nimbus.config.renamed import RENAMED_WORKFLOWS, renamed_config
from nimbus.config.sections import TrainConfig
from nimbus.data.resume import resume_notice
from nimbus.errors import ConfigError
from nimbus.marless.checkpoint import is_multiagent
from nimbus.marless.evaluate import is_multiagent_run

REPO = Path(__file__).resolve().parents[3]
LOGGER = "nimbus.config.renamed"
SHIPPED = {"sync": "ppo-cartpole", "async": "dqn-cartpole", "async_learners": "stellaris-cartpole",
           "multiagent": "marless-ippo-spread"}   # an old value → a shipped config of its workflow


def _old_file(*, tmp_path: Path, name: str) -> Path:
    """The shipped config ``name`` as it was written before the rename: old value, old section key."""
    config = load_config(path=REPO / "configs" / f"{name}.yaml")
    text = dump_config(config=config)
    new = config.train.workflow
    old = next(key for key, value in RENAMED_WORKFLOWS.items() if value == new)
    text = text.replace(f"  workflow: {new}\n", f"  workflow: {old}\n").replace("\noffpolicy:\n", "\nasync_workflow:\n")
    assert f"workflow: {old}\n" in text and "\nasync_workflow:\n" in text
    path = tmp_path / f"old-{name}.yaml"
    path.write_text(text)
    return path


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == LOGGER and record.levelno == logging.WARNING]


@pytest.mark.parametrize("old", sorted(SHIPPED))
def test_each_old_workflow_value_loads_as_its_new_name(old: str, caplog: pytest.LogCaptureFixture) -> None:
    path = REPO / "configs" / f"{SHIPPED[old]}.yaml"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        renamed = load_config(path=path, overrides=[f"train.workflow={old}"])
    assert renamed.train.workflow == RENAMED_WORKFLOWS[old]
    assert renamed == load_config(path=path)
    assert _warnings(caplog) == [f"deprecated names in the config, read as the new ones: train.workflow: {old} is now "
                                 f"{RENAMED_WORKFLOWS[old]}. Write the new names (the old ones are still read)"]


def test_the_train_section_alone_reads_an_old_value(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert TrainConfig(workflow="async_learners").workflow == "stellaris"
    assert len(_warnings(caplog)) == 1 and "train.workflow: async_learners is now stellaris" in _warnings(caplog)[0]
    assert TrainConfig(workflow="marless") == TrainConfig.model_validate({"workflow": "multiagent"})


def test_an_old_config_file_reads_as_the_new_one_with_one_warning(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    path = _old_file(tmp_path=tmp_path, name="dqn-cartpole")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        old = load_config(path=path)
    assert old == load_config(path=REPO / "configs" / "dqn-cartpole.yaml")
    assert old.train.workflow == "offpolicy" and old.offpolicy.max_steps_ahead is not None
    said = _warnings(caplog)
    assert len(said) == 1, said   # one warning for the file, naming each new spelling
    assert "train.workflow: async is now offpolicy" in said[0] and "async_workflow: is now offpolicy:" in said[0]
    assert "async_workflow:" not in dump_config(config=old)   # a run saves the new names


def test_an_old_section_key_path_on_the_command_line(caplog: pytest.LogCaptureFixture) -> None:
    path = REPO / "configs" / "sac-pendulum.yaml"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        config = load_config(path=path, overrides=["async_workflow.lockstep=true", "async_workflow.max_steps_ahead=64"])
    assert config == load_config(path=path, overrides=["offpolicy.lockstep=true", "offpolicy.max_steps_ahead=64"])
    assert config.offpolicy.lockstep and config.offpolicy.max_steps_ahead == 64
    assert "--set async_workflow.lockstep is now --set offpolicy.lockstep" in " ".join(_warnings(caplog))
    with pytest.raises(ConfigError, match=r"offpolicy\.nonsense: unknown key"):
        load_config(path=path, overrides=["async_workflow.nonsense=1"])   # the error names the key by its new name


def test_a_new_key_path_overrides_an_old_section(tmp_path: Path) -> None:
    """``nimbus train --resume OLD_RUN --set offpolicy.lockstep=true``: the old run's saved config holds every key
    under ``async_workflow:``; the override wins, not a conflict."""
    path = _old_file(tmp_path=tmp_path, name="dqn-cartpole")
    config = load_config(path=path, overrides=["offpolicy.lockstep=true"])
    assert config.offpolicy.lockstep
    assert config == load_config(path=REPO / "configs" / "dqn-cartpole.yaml", overrides=["offpolicy.lockstep=true"])


def test_both_section_keys_that_disagree_are_refused_naming_both_key_paths(tmp_path: Path, run_cli) -> None:
    data = {"algo": {"name": "dqn"}, "train": {"workflow": "offpolicy"},
            "async_workflow": {"lockstep": True, "sync_to": "all"}, "offpolicy": {"lockstep": False}}
    with pytest.raises(ConfigError, match=r"async_workflow\.lockstep: True, but offpolicy\.lockstep: False; "
                                          r"async_workflow is the old name of offpolicy: keep one"):
        parse_config(data=data)
    path = tmp_path / "both.yaml"
    path.write_text("algo: {name: dqn}\ntrain: {workflow: offpolicy}\nasync_workflow: {lockstep: true}\n"
                    "offpolicy: {lockstep: false}\n")
    code, said = run_cli("train", str(path))
    assert code == 2 and "async_workflow.lockstep: True, but offpolicy.lockstep: False" in said, said


def test_both_section_keys_that_agree_are_one_section() -> None:
    data = {"algo": {"name": "dqn"}, "train": {"workflow": "offpolicy"},
            "async_workflow": {"lockstep": True, "sync_to": "heard_from"}, "offpolicy": {"lockstep": True}}
    config = parse_config(data=data)
    assert config.offpolicy.lockstep and config.offpolicy.sync_to == "heard_from"
    assert apply_overrides(data=data, overrides=[]) == {"algo": {"name": "dqn"}, "train": {"workflow": "offpolicy"},
                                                        "offpolicy": {"lockstep": True, "sync_to": "heard_from"}}


def test_renamed_config_keeps_the_section_in_place_and_leaves_other_input_alone() -> None:
    data = {"name": "x", "async_workflow": {"lockstep": True}, "train": {"workflow": "sync"}, "seed": 1}
    renamed = renamed_config(data=data, warn=False)
    assert list(renamed) == ["name", "offpolicy", "train", "seed"]
    assert renamed["train"] == {"workflow": "onpolicy"} and data["train"] == {"workflow": "sync"}   # a copy
    assert renamed_config(data=None, warn=False) is None and renamed_config(data=[1], warn=False) == [1]


def test_a_checkpoint_saved_with_old_names_is_no_change_on_resume() -> None:
    """The resume notice compares the checkpoint's saved config with this one's: an old run resumed with the
    config it saved (new names now) changed nothing."""
    current = load_config(path=REPO / "configs" / "dqn-cartpole.yaml").model_dump(mode="json")
    saved = {("async_workflow" if key == "offpolicy" else key): value for key, value in current.items()}
    saved["train"] = {**saved["train"], "workflow": "async"}
    assert resume_notice(state=SimpleNamespace(config=saved, extra={}), current=current) is None
    saved["async_workflow"] = {**saved["async_workflow"], "lockstep": True}
    assert "offpolicy.lockstep: True → False" in resume_notice(state=SimpleNamespace(config=saved, extra={}),
                                                               current=current)


@pytest.mark.parametrize("workflow, expected", [("marless", True), ("multiagent", True), ("onpolicy", False),
                                                ("sync", False), (None, False)])
def test_a_marless_run_is_recognised_by_either_name(workflow: str | None, expected: bool, tmp_path: Path) -> None:
    config = {"train": {"workflow": workflow}} if workflow else {}
    assert is_multiagent(config=config) is expected
    manifest = tmp_path / "policies" / "agent_0" / "checkpoints" / "ckpt-000001" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"config": config}))
    assert is_multiagent_run(path=tmp_path) is expected
