"""Workflows reuse by composition: no registered workflow class inherits from another.

A workflow that subclasses another inherits methods it never reaches and state it must override (Stellaris built the
onpolicy trigger table and threw it away); the parts they share (onpolicy/actor_round.py's ActorRound, the learner
launch, stellaris/filling.py's SliceFilling) are objects a workflow holds. The one base a workflow may have is the
lifecycle over one System (policy/lifecycle.py SystemWorkflow), which is no workflow of its own.
"""

from __future__ import annotations

from nimbus.run.registry import WORKFLOWS, workflow_class


def test_no_registered_workflow_has_another_in_its_mro() -> None:
    classes = {name: workflow_class(name=name) for name in WORKFLOWS}
    registered = set(classes.values())
    inherited = sorted(f"{name}: {cls.__name__} inherits {base.__name__}" for name, cls in classes.items()
                       for base in cls.__mro__[1:] if base in registered)
    assert inherited == []


def test_a_workflow_has_at_most_one_base_below_object() -> None:
    """Inheritance for interfaces only, at most two levels: the workflow, its lifecycle base, object."""
    deep = sorted(f"{name}: {' < '.join(base.__name__ for base in cls.__mro__)}"
                  for name, cls in ((name, workflow_class(name=name)) for name in WORKFLOWS) if len(cls.__mro__) > 3)
    assert deep == []
