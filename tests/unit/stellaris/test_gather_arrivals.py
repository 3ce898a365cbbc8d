"""At the paper's scale (16 learners, simulated with the profile fitted on a real run), a learner slot held until
the rule takes its gradient makes the learners queue behind the one parameter function: every gradient waits
for the aggregations ahead of it, and that wait is its staleness. With ``stellaris.gather_arrivals`` a slot frees
when its gradient lands and the gradients that landed during an aggregation join the queue together."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nimbus.config import load_config
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[3]


def steady_rows(tmp_path: Path, *, gather: bool) -> list[dict[str, float]]:
    config = load_config(path=REPO / "configs" / "stellaris-cartpole.yaml", overrides=[
        "runtime.backend=simulated",
        f"simulation.profile={REPO / 'benchmarks/results/stellaris_paper_scale_profile.yaml'}",
        "stellaris.learners=16", "actors.scaling.num_actors=8", "train.max_rounds=3", "stellaris.decay=0.96",
        f"stellaris.gather_arrivals={str(gather).lower()}", f"output.root_dir={tmp_path / str(gather)}",
        "output.loggers=[]", "output.report=false", "output.status_line=false", "train.eval_episodes=0"])
    rows = read_metrics(path=train(config=config).run_dir / "metrics.jsonl")
    return [row["extras"] for row in rows[1:]]   # round 0 is the cold start


@pytest.mark.parametrize("gather", [True, False])
def test_gathered_arrivals_cut_the_staleness_of_queueing_behind_the_parameter_function(tmp_path: Path,
                                                                                       gather: bool) -> None:
    """Gathering: mean staleness below 4 with several gradients per aggregation; holding the slot (the code
    default): every gradient aggregated alone at a staleness of about 16, the learner count."""
    rows = steady_rows(tmp_path, gather=gather)
    staleness = np.mean([row["staleness/mean"] for row in rows])
    per_aggregation = np.mean([row["staleness/gradients_per_aggregation"] for row in rows])
    if gather:
        assert staleness < 4 and per_aggregation > 1.5, (staleness, per_aggregation)
    else:
        assert staleness > 12 and per_aggregation == 1.0, (staleness, per_aggregation)
