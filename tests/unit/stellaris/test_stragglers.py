"""``stellaris.stragglers`` (a benchmark aid): the chosen learner slot computes ``factor`` times slower, so its
gradients land staler than the others'. A real run on worker processes; the rule's offers are recorded (a spy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nimbus.config import load_config
from nimbus.errors import ConfigError
from nimbus.run.loop import train
from nimbus.stellaris.rules import AsyncRule

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "stellaris-cartpole.yaml"
QUIET = ["output.loggers=[]", "output.report=false", "output.status_line=false", "train.eval_episodes=0"]


@pytest.mark.timeout(200)
def test_a_straggler_slots_gradients_arrive_staler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails without the option (no key ``stragglers``: ConfigError) or with a factor that does nothing (slot 0's
    mean staleness is then about the others': 2.82 vs 2.91 measured). With it: 9.0 vs 2.2, 5 tasks vs 22 each;
    the test asks for 1.5× (the machine is shared)."""
    seen: dict[int, list[int]] = {}
    offer = AsyncRule.offer
    monkeypatch.setattr(AsyncRule, "offer", lambda self, *, arrival: seen.setdefault(arrival.slot, []).append(
        self.version - arrival.read_version) or offer(self, arrival=arrival))
    config = load_config(path=CONFIG, overrides=[
        "stellaris.rule=async", "stellaris.stragglers={learners: [0], factor: 10}", "train.max_rounds=3",
        f"output.root_dir={tmp_path}", *QUIET])
    train(config=config)
    assert set(seen) == {0, 1, 2}
    slow, others = np.mean(seen[0]), np.mean(seen[1] + seen[2])
    assert slow > 1.5 * others, (slow, others, {slot: len(v) for slot, v in seen.items()})   # load: a wide margin
    assert len(seen[0]) < min(len(seen[1]), len(seen[2]))   # and it computes fewer of the round's tasks


def test_a_straggler_slot_must_be_a_learner_slot(tmp_path: Path) -> None:
    with pytest.raises((ConfigError, ValueError), match="stragglers.learners"):
        load_config(path=CONFIG, overrides=["stellaris.stragglers={learners: [3], factor: 2}",
                                            f"output.root_dir={tmp_path}"])
