"""ARTOS pipelines in whole runs: the dual-stage learner reproduces the unpipelined run exactly, and the
mini-batch pipeline (a different epoch-1 shuffle) runs, consumes every row once and leaks nothing."""

from __future__ import annotations

from nimbus.data.shm import list_segments, run_prefix
from nimbus.run.loop import train


def _trace(result) -> list[tuple]:
    return [(row.return_mean, row.env_steps, row.losses.get("policy_loss"), row.losses.get("value_loss"))
            for row in result.rows]


def test_dual_stage_run_reproduces_the_unpipelined_run(make_config) -> None:
    plain = train(config=make_config(overrides=["train.max_rounds=5"]))
    piped = train(config=make_config(overrides=["train.max_rounds=5", "pipeline.dual_stage=true"]))
    a, b = _trace(plain), _trace(piped)
    assert len(a) == len(b) == 5
    for row_a, row_b in zip(a, b):
        assert row_a[:2] == row_b[:2]  # same returns and env steps: the same policies acted
        assert abs(row_a[2] - row_b[2]) < 1e-5 and abs(row_a[3] - row_b[3]) < 1e-5


def test_minibatch_pipeline_run_completes_and_consumes_every_row_once(make_config) -> None:
    result = train(config=make_config(overrides=["train.max_rounds=6", "pipeline.minibatch=true",
                                                 "pipeline.dual_stage=true", "pipeline.loader=true"]))
    rows = result.rows
    assert len(rows) == 6
    # waiting (state load + rows not yet there) and computing are disjoint parts of the learner's time
    assert all(0 < row.extras["pipeline_wait_s"] < row.learning_s - row.extras["compute_s"] + 1e-6 for row in rows)
    per_round = rows[0].env_steps
    assert [row.env_steps for row in rows] == [per_round * (i + 1) for i in range(6)]
    assert all(row.losses["num_gradient_steps"] > 0 for row in rows)
    assert list_segments(prefix=run_prefix()) == []
