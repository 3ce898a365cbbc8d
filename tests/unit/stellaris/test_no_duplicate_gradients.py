"""No two applied gradients come from the same slice at the same version: two passes of one slice launched at one
version compute the same gradient bit for bit, so applying both counts that slice twice in the step."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nimbus.config import load_config
from nimbus.run.loop import train
from nimbus.stellaris.workflow import StellarisWorkflow

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "stellaris-cartpole.yaml"
SIMULATED = ["runtime.backend=simulated", "simulation.functions.actor.distribution=lognormal",
             "simulation.functions.actor.sigma=0.5"]


def applied_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overrides: list[str]) -> list[tuple[str, int]]:
    """(slice key, read version) of every gradient the parameter function applied in a run."""
    applied: list[tuple[str, int]] = []
    on_parameter = StellarisWorkflow._on_parameter

    def recording(self, *, future, aggregation, batch, request):
        refused = {r["key"] for r in future.result().header["refused"]}
        if future.result().header["published"]:
            applied.extend((self.held[m.key].data_key, self.held[m.key].read_version)
                           for m in aggregation.members if m.key not in refused)
        on_parameter(self, future=future, aggregation=aggregation, batch=batch, request=request)

    monkeypatch.setattr(StellarisWorkflow, "_on_parameter", recording)
    train(config=load_config(path=CONFIG, overrides=[
        f"output.root_dir={tmp_path}", "output.loggers=[]", "output.report=false", "output.status_line=false",
        "train.eval_episodes=0", *overrides]))
    return applied


@pytest.mark.parametrize("overrides", [
    ["runtime.backend=inline", "train.max_rounds=4"],
    # the paper's scale in round 0: 16 learners, 8 actors (16 slices), the first actor's slices ready alone
    [*SIMULATED, "stellaris.learners=16", "actors.scaling.num_actors=8", "train.max_rounds=2"],
], ids=["inline-shipped", "simulated-16-learners"])
def test_no_two_applied_gradients_come_from_one_slice_at_one_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     overrides: list[str]) -> None:
    """Fails before passes of a slice were held back until a newer version: free learner slots took the second,
    third and fourth pass of the first slices at version 0."""
    applied = applied_sources(tmp_path, monkeypatch, overrides)
    twice = {source: n for source, n in Counter(applied).items() if n > 1}
    assert len(applied) >= 16 and not twice, twice
