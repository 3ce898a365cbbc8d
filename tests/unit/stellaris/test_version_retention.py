"""Policy versions in the Store stay bounded over a run: retention deletes every version no reader needs, not only
a window just below the floor (a resident parameter function's anchor pins the floor for ``FULL_STATE_EVERY``
aggregations, and when it moves the floor jumps past versions a fixed window never reaches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config import load_config
from nimbus.run.loop import train
from nimbus.stellaris import resident_log
from nimbus.stellaris.workflow import StellarisWorkflow

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "stellaris-cartpole.yaml"


def test_weights_keys_stay_under_a_bound_that_does_not_grow_with_the_run(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Inline run of the shipped config with the resident parameter function, the full state every 14
    aggregations (above the 4 × learners = 12 versions the old retention swept below its floor): after every
    parameter call, the ``weights/main/*`` keys number at most keep_versions + learners (read by learners in
    flight or held gradients) + the anchor + the sampling round's version + 1 (the one just published), and
    version 0 is gone once the anchor has moved past it. Before the fix the count grew with every anchor move
    (2 more versions a move here, 10 with the shipped 50) and version 0 stayed."""
    monkeypatch.setattr(resident_log, "FULL_STATE_EVERY", 14)
    counts: list[tuple[int, int, bool]] = []
    on_parameter = StellarisWorkflow._on_parameter

    def counting(self, *, future, aggregation, batch, request):
        on_parameter(self, future=future, aggregation=aggregation, batch=batch, request=request)
        keys = self.system.store.keys(prefix=f"weights/{self.policy}")
        counts.append((self.progress.policy_version, len(keys), f"weights/{self.policy}/0" in keys))

    monkeypatch.setattr(StellarisWorkflow, "_on_parameter", counting)
    config = load_config(path=CONFIG, overrides=[
        "train.max_rounds=12", f"output.root_dir={tmp_path}", "output.loggers=[]", "output.report=false",
        "output.status_line=false", "train.eval_episodes=0", "runtime.backend=inline",
        "stellaris.resident_parameter=true", "train.checkpoint_every_rounds=1000"])
    train(config=config)
    bound = config.store.keep_versions + config.stellaris.learners + 3
    assert counts[-1][0] >= 3 * 14, counts[-1]   # three anchor moves at least
    assert max(count for _, count, _ in counts) <= bound, counts
    assert not any(has_zero for version, _, has_zero in counts if version > 2 * 14), counts
