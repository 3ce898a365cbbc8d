"""``marless/learner_invocations`` counts the learner functions a round invoked (issue 27, item 6): VDN's
post-processing runs once per round for the team, not once per policy, and so does its policy function since
the joint update (issue 27 item 5, marless/team_learner.py): 3 policies invoke 1 + 1, not 3 × 2 (nor 3 + 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config import apply_overrides, load_config, parse_config
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[3]


def rows_of(tmp_path: Path, name: str, overrides: list[str]):
    base = load_config(path=REPO / "configs" / f"{name}.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    config = parse_config(data=apply_overrides(data=base, overrides=[
        "runtime.backend=inline", "env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}",
        "train.max_rounds=2", *overrides]))
    return train(config=config).rows


@pytest.mark.parametrize(("name", "overrides", "per_round"), [
    ("marless-vdn-spread", ["algo.learning_starts=100", "algo.gradient_steps=2"], 1 + 1),   # the team's two
    ("marless-qmix-spread", ["algo.learning_starts=100", "algo.gradient_steps=2"], 1 + 1),
    ("marless-iql-spread", ["algo.learning_starts=100", "algo.gradient_steps=2"], 3),
    ("marless-ippo-spread", ["algo.num_epochs=1"], 3 * 2),                                  # critic + policy each
])
def test_learner_invocations_are_the_functions_invoked(tmp_path: Path, name: str, overrides: list[str],
                                                       per_round: int) -> None:
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    rows = rows_of(tmp_path, name, overrides)
    assert [r.extras["marless/learner_invocations"] for r in rows] == [per_round, per_round]
