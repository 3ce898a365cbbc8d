"""Pre-warming in every workflow and ahead of a scale-up (issue 25.7): with ``prewarm.mode: monitor`` the actors a
scaler adds next round are pre-warmed when it decides, and the next round's invocations find them warm."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from nimbus.config import parse_config
from nimbus.cost.ledger import Ledger, LedgerRecord
from nimbus.run.loop import train

NITRO = ("actors.scaling={kind: nitro, min_actors: 1, max_actors: 3, "
         "hessian: {subset_size: 256, max_iterations: 30}}")
# no start-up pre-warm (round 0 starts its actors cold), room for every worker, actors never reclaimed
QUIET = ["runtime.prewarm=false", "runtime.max_workers=10", "prewarm.mode=monitor"]


def _actor_attempts(rows: list[LedgerRecord], *, after: float) -> list[LedgerRecord]:
    return [r for r in rows if r.function == "actor" and r.outcome == "ok" and r.queued_at > after]


def _scale_up_prewarms(rows: list[LedgerRecord]) -> list[LedgerRecord]:
    return [r for r in rows if r.function == "actor" and r.outcome == "prewarm" and r.cold]


def _increases(counts: list[int]) -> int:
    return sum(max(0, b - a) for a, b in zip(counts, counts[1:]))


def _new_peak(counts: list[int]) -> bool:
    """Some round runs more actors than any before it: without pre-warming its extra actors start cold."""
    return any(n > max(counts[:i]) for i, n in enumerate(counts) if i)


def test_sync_nitro_scale_up_from_k_to_k_actors_finds_the_added_workers_warm(make_config) -> None:
    torch.set_num_threads(1)
    result = train(config=make_config(overrides=[*QUIET, NITRO, "algo.minibatch_size=64", "train.max_rounds=8"]))
    counts = [row.num_actors for row in result.rows]
    assert _new_peak(counts), counts
    rows = Ledger.load(path=result.run_dir / "ledger.jsonl")
    first_learner_end = min(r.end_at for r in rows if r.function == "learner" and r.outcome == "ok")
    assert len(_scale_up_prewarms(rows)) == _increases(counts)              # K − k for each scale-up k → K
    later = _actor_attempts(rows, after=first_learner_end)
    assert len(later) == sum(counts[1:]) and not [r for r in later if r.cold]   # every later actor found a warm worker
    assert result.rows[-1].extras["prewarm/scaled_up"] >= 1


def _data(tmp_path: Any, **sections: Any) -> dict[str, Any]:
    return {**sections, "seed": 0,
            "runtime": {"prewarm": False, "max_workers": 10}, "prewarm": {"mode": "monitor"},
            "output": {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}}


def test_offpolicy_workflow_boosted_ranks_start_warm(tmp_path) -> None:
    torch.set_num_threads(1)
    data = _data(tmp_path, name="impala-prewarm", env={"id": "CartPole-v1", "num_envs_per_actor": 2},
                 algo={"name": "impala", "rollout_length": 16, "hidden_sizes": [32, 32]},
                 actors={"fragment_steps": 16, "scaling": {"kind": "hydrozoa", "initial_actors": 1, "max_actors": 3,
                                                            "double_every_rounds": 2}},
                 offpolicy={"max_steps_ahead": 128},
                 train={"workflow": "offpolicy", "max_rounds": 8, "total_env_steps": 100_000, "eval_episodes": 0})
    result = train(config=parse_config(data=data))
    decided = [1] + [int(row.extras["next_num_actors"]) for row in result.rows]
    assert max(decided) == 3, decided
    rows = Ledger.load(path=result.run_dir / "ledger.jsonl")
    assert len(_scale_up_prewarms(rows)) == _increases(decided)
    first = min(r.queued_at for r in rows if r.function == "actor" and r.outcome == "ok")
    cold = [r for r in rows if r.function == "actor" and r.outcome == "ok" and r.cold]
    assert [r.queued_at for r in cold] == [first]        # only rank 0's very first fragment started a worker


def test_stellaris_scale_up_finds_warm_workers(make_shipped_config) -> None:
    torch.set_num_threads(1)
    config = make_shipped_config("stellaris-cartpole", overrides=[
        *QUIET, "actors.scaling={kind: hydrozoa, initial_actors: 1, max_actors: 3, double_every_rounds: 1}",
        "train.max_rounds=10", "algo.num_epochs=1"])
    # stellaris overlaps rounds: the next round's actors start before this round's row (and the scaler's
    # decision) exists, so a decision lands one or more rounds later, more under load (two full-suite runs saw
    # [1] * 6 with 6 rounds and a doubling every 2). Doubling every round with 10 rounds leaves room for that lag.
    result = train(config=config)
    counts = [row.num_actors for row in result.rows]
    assert _new_peak(counts), counts
    rows = Ledger.load(path=result.run_dir / "ledger.jsonl")
    assert len(_scale_up_prewarms(rows)) >= 1
    first = min(r.queued_at for r in rows if r.function == "actor" and r.outcome == "ok")
    cold = [r for r in rows if r.function == "actor" and r.outcome == "ok" and r.cold]
    assert [r.queued_at for r in cold] == [first], [(r.queued_at - first, r.worker_id) for r in cold]


def test_multiagent_marless_scale_up_finds_warm_workers(make_shipped_config) -> None:
    torch.set_num_threads(1)
    config = make_shipped_config("marless-ippo-spread", overrides=[
        *QUIET, "marless.scaling=marless", "marless.i_max=3", "marless.i_min=1", "marless.scaling_window=4",
        "train.max_rounds=8"])
    result = train(config=config)
    counts = [row.num_actors for row in result.rows]
    assert _new_peak(counts), counts   # I_min until four probes give the scaler a noise level, then a scale-up
    rows = Ledger.load(path=result.run_dir / "ledger.jsonl")
    assert len(_scale_up_prewarms(rows)) == _increases(counts)
    first_learner_end = min(r.end_at for r in rows if r.kind != "actor" and r.outcome == "ok")
    later = _actor_attempts(rows, after=first_learner_end)
    assert len(later) == sum(counts[1:]) and not [r for r in later if r.cold]
    assert result.rows[-1].extras["prewarm/scaled_up"] == _increases(counts)


def test_a_run_with_prewarm_bills_the_provisioned_time(make_config) -> None:
    """runtime.prewarm starts the learner and the actors before round 0: provisioned capacity (issue 25.9), billed
    from each worker's ready to the last round's end, idle or not, and in the run's cost."""
    from nimbus.cost.pricing import load_pricing

    torch.set_num_threads(1)
    result = train(config=make_config(overrides=["train.max_rounds=3", "runtime.prewarm=true"]))
    rows = Ledger.load(path=result.run_dir / "ledger.jsonl")
    starts = {r.worker_id: r for r in rows if r.outcome == "prewarm" and r.cold}
    assert {r.function for r in starts.values()} == {"actor", "learner"}
    last_attempt_end = max(r.end_at for r in rows if r.outcome == "ok")
    for worker_id, start in starts.items():
        stretches = [r for r in rows if r.worker_id == worker_id and r.outcome == "prewarm" and not r.cold]
        assert stretches and all(r.provisioned for r in stretches), worker_id
        assert stretches[0].start_at == start.end_at                             # from ready ...
        assert all(a.end_at == b.start_at for a, b in zip(stretches, stretches[1:]))   # ... without a gap ...
        assert stretches[-1].end_at >= last_attempt_end - 1.0                   # ... to the last round's end
    assert all(r.provisioned for r in rows if r.outcome == "ok" and r.worker_id in starts)
    pricing = load_pricing()
    stretch_usd = sum(pricing.cost_usd(record=r) for r in rows if r.outcome == "prewarm" and not r.cold)
    assert stretch_usd > 0
    assert result.summary.serverless_cost_usd == pytest.approx(sum(pricing.cost_usd(record=r) for r in rows))
