"""What the ``async_learners`` workflow adds to a checkpoint (stellaris/workflow.py mixes it in before SyncWorkflow).

The aggregation rule's state travels in the checkpoint's ``extra`` and is restored on resume;
with a resident parameter function (stellaris/resident.py) the newest version's optimizer state is exported to
the Store before the checkpoint reads it (resident_log.ResidentLog.export).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
RULE_STATE_KEY = "stellaris_rule"   # the checkpoint manifest's extra: the aggregation rule's state


class StellarisCheckpoint:
    """Mixed into AsyncLearnersWorkflow: uses its ``rule``, ``resident``, ``parameter_spec``, ``parameter_busy``,
    ``_model_fields`` and ``_delete``, and the lifecycle's ``checkpoint``/``publish`` after it in the MRO."""

    rule: Any
    resident: Any

    def checkpoint_extra(self) -> dict:
        """The rule's state (δmax and its measurement, round, counters: rule_base.Rule.state) goes in the checkpoint,
        so a resumed run continues β_k instead of measuring δmax again."""
        return {RULE_STATE_KEY: self.rule.state()}

    def checkpoint(self) -> Path:
        """With a resident parameter function the newest version's optimizer state is put only for checkpoints:
        exported first (stellaris/resident.py), then saved as every workflow's."""
        version = self.progress.policy_version
        if self.resident is not None:
            self._delete(keys=self.resident.export(
                version=version, model=self._model_fields(version=version), store=self.system.store,
                invoke=lambda message: self.system.runtime.invoke(spec=self.parameter_spec, request=message),
                parameter_busy=self.parameter_busy))
        return super().checkpoint()

    def publish(self) -> None:
        """The checkpoint's version (lifecycle.py), and the rule's state saved with it. A resume under another
        rule (``--set stellaris.rule=...``) starts that rule fresh."""
        super().publish()
        saved = self.resumed.extra.get(RULE_STATE_KEY) if self.resumed is not None else None
        if saved is None:
            return
        if saved.get("rule") != self.rule.name:
            log.warning("the checkpoint's rule is %s, this run's %s: the rule starts fresh", saved.get("rule"),
                        self.rule.name)
            return
        self.rule.restore(state=saved)
