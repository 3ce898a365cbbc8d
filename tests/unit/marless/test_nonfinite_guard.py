"""``train.max_nonfinite_losses`` in MARLess: every learner function counts the steps a non-finite loss or gradient
skipped, and the driver stops the run after that many rounds in a row with one (the guard the other workflows use,
``Progress.count_nonfinite``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import nimbus.config  # noqa: F401  (first: nimbus.config.root imports nimbus.marless.config, a cycle otherwise)
from nimbus.config import apply_overrides, load_config, parse_config
from nimbus.errors import NimbusError
from nimbus.marless.learning import nonfinite_round

REPO = Path(__file__).resolve().parents[3]
GAME = "tests.unit.marless.coord_env:make_env"


@pytest.fixture(autouse=True)
def one_torch_thread() -> None:
    torch.set_num_threads(1)


def _config(tmp_path: Path, *, algo: str, reward: float, limit: int):
    base = load_config(path=REPO / "configs" / f"marless-{algo}-spread.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    value = ["algo.learning_starts=0", "algo.gradient_steps=4", "algo.batch_size=16"] if algo != "ippo" else \
        ["algo.num_epochs=1", "algo.num_minibatches=2"]
    return parse_config(data=apply_overrides(data=base, overrides=[
        f"env.id={GAME}", f"env.kwargs={{horizon: 5, reward: {reward}}}", "env.num_envs_per_actor=4",
        "actors.fragment_steps=5", "actors.restore_slots=false", "actors.scaling={kind: fixed, num_actors: 1}",
        "runtime.backend=inline", "train.max_rounds=6", "train.eval_episodes=2",
        f"train.max_nonfinite_losses={limit}", "algo.hidden_sizes=[8]", *value]))


def test_a_round_counts_as_nonfinite_when_any_learner_skipped_a_step() -> None:
    assert not nonfinite_round(stats={"p_a": {"policy_loss": 1.0, "nonfinite_steps": 0.0}})
    assert nonfinite_round(stats={"p_a": {"nonfinite_steps": 0.0}, "p_b": {"critic_nonfinite_steps": 3.0}})


@pytest.mark.parametrize("algo", ["ippo", "vdn", "iql"])
def test_a_loss_that_overflows_every_round_stops_the_run(tmp_path: Path, algo: str) -> None:
    """Rewards of 1e38 (finite, so the env contract lets them through) overflow every learner's loss to inf: each
    round's steps are skipped, and the run stops after ``max_nonfinite_losses`` = 2 rounds instead of training on."""
    from nimbus.run.loop import train

    with pytest.raises(NimbusError, match=r"2 rounds of learners in a row produced a non-finite loss or gradient"):
        train(config=_config(tmp_path, algo=algo, reward=1e38, limit=2))
    rows = [line for path in tmp_path.rglob("metrics.jsonl") for line in path.read_text().splitlines()]
    assert len(rows) == 1          # round 0 was written; round 1 tripped the guard


def test_finite_losses_run_to_the_end(tmp_path: Path) -> None:
    from nimbus.run.loop import train

    result = train(config=_config(tmp_path, algo="vdn", reward=0.5, limit=1))
    assert len(result.rows) == 6
