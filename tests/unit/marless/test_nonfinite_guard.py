"""``train.max_nonfinite_losses`` in MARLess: every learner function counts the steps a non-finite loss or gradient
skipped, and the driver stops the run after that many rounds in a row with one (the guard the other workflows use,
``Progress.count_nonfinite``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

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


@pytest.mark.parametrize("algo_name", ["iql", "vdn", "qmix"])
def test_a_skipped_step_leaves_the_weights_and_adams_state_as_they_were(store, algo_name: str) -> None:
    """Every step of this round overflows (rewards 1e38: the TD loss is inf). The guard is decided on the device
    without a read, so the step runs and is undone: the published weights are version 0's bit for bit, and Adam has
    no moment and no step count from it."""
    import numpy as np

    from nimbus.algos.multiagent.config import IQLConfig, QMIXConfig, VDNConfig
    from nimbus.algos.multiagent.iql import IQL
    from nimbus.algos.multiagent.qmix import QMIX
    from nimbus.algos.multiagent.vdn import VDN
    from nimbus.marless.team_learner import team_value_function
    from nimbus.marless.value_learner import team_post_key, value_policy_function
    from nimbus.models.weights import optim_key, weights_key
    from tests.unit.function_helpers import ctx, on_store
    from tests.unit.marless.test_marless_value_learner import (
        OWN,
        game_rows,
        learner_request,
        load_policies,
        put_round,
        setup_policies,
        small,
        team_request,
    )

    algo_cls, config_cls = {"iql": (IQL, IQLConfig), "vdn": (VDN, VDNConfig), "qmix": (QMIX, QMIXConfig)}[algo_name]
    algo = algo_cls(config=small(config_cls, gradient_steps=3, batch_size=8))
    setup_policies(store=store, algo=algo, agent_policy=OWN)
    versions = {"p_agent_0": 0, "p_agent_1": 0}
    rows = game_rows(policies=load_policies(store=store, algo=algo, agent_policy=OWN, versions=versions), algo=algo,
                     num_envs=4, rng=np.random.default_rng(0))
    for agent_rows in rows.values():
        agent_rows["rewards"] = np.full_like(agent_rows["rewards"], 1e38)
    put_round(store=store, algo=algo, round=0, rows=rows, agent_policy=OWN)
    if algo.joint:
        request = team_request(algo=algo, round=0, agent_policy=OWN, versions=versions,
                               replay_keys=[team_post_key(round=0)])
        header = team_value_function(context=ctx("policy"), request=on_store(request.to_message(), store)).header
        stats = header["policies"]["p_agent_0"]
    else:
        request = learner_request(algo=algo, policy="p_agent_0", round=0, agent_policy=OWN, versions=versions,
                                  replay_keys=["batch/p_agent_0/r0"])
        stats = value_policy_function(context=ctx("policy"), request=on_store(request.to_message(), store)).header
    assert stats["nonfinite_steps"] == 3 and stats["gradient_steps_run"] == 0
    before, after = (store.get(key=weights_key(policy="p_agent_0", version=v)).arrays for v in (0, 1))
    assert all(np.array_equal(before[k], after[k]) for k in before if k.startswith("param."))
    optim = store.get(key=optim_key(policy="p_agent_0", version=1))
    assert all(not np.any(value) for value in optim.arrays.values())                 # no moment
    assert all(s.get("step", 0.0) == 0.0 for s in optim.header["scalars"].values())   # no step counted
