"""What the ``stellaris`` workflow adds to a checkpoint: ``StellarisCheckpoint``, a part that
stellaris/workflow.py's StellarisWorkflow holds and calls from its ``checkpoint_extra``, ``checkpoint`` and
``publish`` (the lifecycle's, policy/lifecycle.py, does the rest).

The aggregation rule's state travels in the checkpoint's ``extra`` and is restored on resume;
with a resident parameter function (stellaris/resident.py) the newest version's optimizer state is exported to
the Store before the checkpoint reads it (resident_log.ResidentLog.export).

Example::

    persistence = StellarisCheckpoint(rule=rule, resident=resident, store=system.store, invoke=invoke_parameter)
    extra = persistence.extra()                           # {"stellaris_rule": rule.state()}
    gone = persistence.export(version=7, model=model_fields, parameter_busy=False)   # gradient keys to delete
    persistence.restore(resumed=checkpoint_state)         # on resume, after the weights are published
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from nimbus.data.checkpoint import CheckpointState
from nimbus.data.codec import Message
from nimbus.data.store import Store
from nimbus.stellaris.resident_log import ResidentLog
from nimbus.stellaris.rule_base import Rule

log = logging.getLogger(__name__)
RULE_STATE_KEY = "stellaris_rule"   # the checkpoint manifest's extra: the aggregation rule's state


class StellarisCheckpoint:
    """The rule's state in and out of a checkpoint; the resident parameter function's export before one.
    ``invoke`` runs one parameter function request (the workflow's parameter spec on its runtime)."""

    def __init__(self, *, rule: Rule, resident: ResidentLog | None, store: Store,
                 invoke: Callable[[Message], Future]) -> None:
        self.rule, self.resident, self.store, self.invoke = rule, resident, store, invoke

    def extra(self) -> dict[str, Any]:
        """The rule's state (δmax and its measurement, round, counters: rule_base.Rule.state) goes in the checkpoint,
        so a resumed run continues β_k instead of measuring δmax again."""
        return {RULE_STATE_KEY: self.rule.state()}

    def export(self, *, version: int, model: dict[str, Any], parameter_busy: bool) -> list[str]:
        """With a resident parameter function the newest version's optimizer state is put only for checkpoints:
        exported now (stellaris/resident.py). The gradient keys the Store may drop (none without one)."""
        if self.resident is None:
            return []
        return self.resident.export(version=version, model=model, store=self.store, invoke=self.invoke,
                                    parameter_busy=parameter_busy)

    def restore(self, *, resumed: CheckpointState | None) -> None:
        """The rule's state saved with the checkpoint. A resume under another rule (``--set stellaris.rule=...``)
        starts that rule fresh."""
        saved = resumed.extra.get(RULE_STATE_KEY) if resumed is not None else None
        if saved is None:
            return
        if saved.get("rule") != self.rule.name:
            log.warning("the checkpoint's rule is %s, this run's %s: the rule starts fresh", saved.get("rule"),
                        self.rule.name)
            return
        self.rule.restore(state=saved)
