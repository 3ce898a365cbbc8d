"""Several workloads on one pool run any one-policy workflow, since the one run loop (run/members.py) drives every
workflow the same way: an off-policy DQN workload beside an on-policy PPO one, each under its own policy name in
the pool's one Store (before the one loop, the pool took onpolicy workloads only, and the off-policy workflow wrote
its weights under a global name whatever policy it was built for)."""

from __future__ import annotations

import pytest

from nimbus.errors import ConfigError
from nimbus.run.workloads import train_workloads
from support import pool_ledger


def test_an_off_policy_workload_runs_beside_an_on_policy_one_each_under_its_own_policy(
        make_config, make_shipped_config, tmp_path) -> None:
    ppo = make_config(overrides=["name=cartA", "train.max_rounds=3", "runtime.backend=inline"])
    dqn = make_shipped_config("dqn-cartpole", ["name=dqnB", "train.max_rounds=3", "runtime.backend=inline",
                                               "algo.learning_starts=64", "seed=1"])
    results = train_workloads(configs=[ppo, dqn])
    assert [r.summary.rounds for r in results] == [3, 3], [r.summary for r in results]
    assert [r.summary.stopped_by for r in results] == ["max_rounds", "max_rounds"]
    assert {r.function for r in pool_ledger(tmp_path)} == {"cartA/actor", "cartA/learner", "dqnB/actor",
                                                           "dqnB/learner"}
    for result in results:   # each final checkpoint read its own policy's newest weights back from the Store
        assert list((result.run_dir / "checkpoints").iterdir())


def test_a_multi_agent_workload_is_refused_with_the_reason(make_config, make_shipped_config) -> None:
    ppo = make_config(overrides=["name=cartA"])
    marless = make_shipped_config("marless-ippo-spread", ["name=spread"])
    with pytest.raises(ConfigError, match="train.workflow: workload 2 .spread.: .* marless"):
        train_workloads(configs=[ppo, marless])
