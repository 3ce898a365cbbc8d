"""The convexity probe runs only on the rounds a controller reads it, on the whole batch (issue 27 fix 2).

The sharing controller reads the convexity only when it switches sharing on (the base agent of each group); the
scaler reads it every round. Before, every round of a sharing-only run probed every policy (256 rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config import apply_overrides, load_config, parse_config
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[3]
SMALL = ["runtime.backend=inline", "env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}",
         "algo.num_epochs=2", "marless.window=2", "marless.gamma=100"]   # γ above any slope: a toggle per window


def run(tmp_path: Path, overrides: list[str]):
    base = load_config(path=REPO / "configs" / "marless-ippo-spread.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    return train(config=parse_config(data=apply_overrides(data=base, overrides=[*SMALL, *overrides]))).rows


def probed_rows(row) -> dict[str, float]:
    return {k.split("/")[0]: v for k, v in row.losses.items() if k.endswith("/probe_rows") and v > 0}


def test_a_sharing_only_run_probes_only_on_the_rounds_it_switches_sharing_on(tmp_path: Path) -> None:
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    rows = run(tmp_path, ["train.max_rounds=6", "marless.sharing=marless", "marless.scaling=fixed",
                          "actors.fragment_steps=150"])
    assert [int(r.extras["marless/policies"]) for r in rows] == [3, 3, 2, 2, 3, 3]   # on at 1, off at 3, on at 5
    assert [bool(probed_rows(r)) for r in rows] == [False, True, False, False, False, True]
    batch_rows = 1 * 2 * 150   # actors × envs × fragment steps, one agent per policy: the whole batch, not 256
    assert probed_rows(rows[1]) == dict.fromkeys(["p_agent_0", "p_agent_1", "p_agent_2"], float(batch_rows))


def test_a_scaling_run_probes_every_round(tmp_path: Path) -> None:
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    rows = run(tmp_path, ["train.max_rounds=2", "marless.sharing=none", "marless.scaling=marless",
                          "marless.i_max=2"])
    assert all(len(probed_rows(r)) == 3 for r in rows)
