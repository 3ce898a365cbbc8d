"""run/registry.py: the loop finds every workflow (and the population controller) by name and imports none."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

import nimbus.run.loop
from nimbus.config import load_config
from nimbus.config.sections import TrainConfig
from nimbus.run.registry import CONTROLLERS, WORKFLOWS, controller_class, workflow_class, workflow_name

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", sorted(WORKFLOWS))
def test_every_entry_imports_and_meets_the_workflow_protocol(name: str) -> None:
    workflow = workflow_class(name=name)
    assert isinstance(workflow, type) and f"{workflow.__module__}:{workflow.__name__}" == WORKFLOWS[name]
    missing = [member for member in ("build", "start", "begin", "handle", "poll", "exhausted", "request_stop",
                                     "checkpoint", "evaluate", "close", "metrics")
               if not hasattr(workflow, member)]
    assert missing == []
    assert callable(workflow.build) and getattr(workflow.build, "__self__", None) is workflow   # a classmethod


def test_the_names_cover_the_configs_train_workflow_literal() -> None:
    literal = set(typing.get_args(TrainConfig.model_fields["workflow"].annotation))
    assert literal and literal <= set(WORKFLOWS)
    assert set(WORKFLOWS) - literal == {"pipelined"}   # chosen by the pipeline flags, not by train.workflow


def test_a_pipeline_flag_picks_the_pipelined_workflow() -> None:
    config = load_config(path=REPO / "configs" / "ppo-cartpole.yaml")
    assert workflow_name(config=config) == "onpolicy"
    piped = config.model_copy(update={"pipeline": config.pipeline.model_copy(update={"dual_stage": True})})
    assert workflow_name(config=piped) == "pipelined"


def test_the_population_controller_imports_by_name() -> None:
    assert [f"{c.__module__}:{c.__name__}" for c in map(lambda n: controller_class(name=n), CONTROLLERS)] == \
        list(CONTROLLERS.values())


def test_the_loop_imports_no_workflow_and_no_technique() -> None:
    techniques = ("nimbus.onpolicy", "nimbus.offpolicy", "nimbus.stellaris", "nimbus.marless", "nimbus.pbt")
    for module in ("loop", "members", "workloads", "rounds", "registry"):
        tree = ast.parse((Path(nimbus.run.loop.__file__).parent / f"{module}.py").read_text())
        imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
        assert [m for m in imported if m.startswith(techniques)] == [], module
