"""Workflows found by name, so the run loop imports none (the ``config/algo.py`` ALGO_SECTIONS pattern).

Each entry is ``module:Class`` of a class that implements core.Workflow; it is imported when a run uses it.
``train.workflow`` names it, except that the onpolicy workflow with an ARTOS pipeline flag on runs as ``pipelined``: the
same class, which holds the pipelined learner launch (onpolicy/pipelined.py) when ``pipeline:`` asks for it. No class
here inherits from another (tests/unit/test_workflow_shapes.py).

Example::

    workflow_class(name=workflow_name(config=config))   # <class 'nimbus.onpolicy.workflow.OnPolicyWorkflow'>
"""

from __future__ import annotations

import importlib

from nimbus.config import NimbusConfig

WORKFLOWS: dict[str, str] = {
    "onpolicy": "nimbus.onpolicy.workflow:OnPolicyWorkflow",
    "pipelined": "nimbus.onpolicy.workflow:OnPolicyWorkflow",   # ARTOS pipelines (pipeline:)
    "offpolicy": "nimbus.offpolicy.workflow:OffPolicyWorkflow",  # off-policy (XingTian, ARTOS)
    "stellaris": "nimbus.stellaris.workflow:StellarisWorkflow",  # Stellaris
    "marless": "nimbus.marless.workflow:MarlessWorkflow",       # MARLess
}
"""Every workflow class by name, as ``module:Class``."""

CONTROLLERS: dict[str, str] = {
    "population": "nimbus.pbt.population:Population",           # policies: / pbt: (a controller over member workflows)
}
"""Every member controller by name, as ``module:Class``."""


def workflow_name(*, config: NimbusConfig) -> str:
    """``pipelined`` when a pipeline flag is set (any workflow but marless), else ``train.workflow``."""
    if config.train.workflow != "marless" and (config.pipeline.minibatch or config.pipeline.dual_stage):
        return "pipelined"
    return config.train.workflow


def workflow_class(*, name: str) -> type:
    """The class ``WORKFLOWS[name]`` names, imported now."""
    return _load(WORKFLOWS[name])


def controller_class(*, name: str) -> type:
    """The class ``CONTROLLERS[name]`` names, imported now."""
    return _load(CONTROLLERS[name])


def _load(path: str) -> type:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)
