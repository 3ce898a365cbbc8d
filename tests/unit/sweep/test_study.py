"""The sweep's pieces that need no training: the pruning hook over K seeds, the score of a trial, a trial's configs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from nimbus.sweep.study import PruneOnRound, score_of, trial_configs
from nimbus.types import RoundMetrics


def _row(*, round: int, ret: float | None) -> RoundMetrics:
    return RoundMetrics(round=round, env_steps=100 * (round + 1), episodes=round, return_mean=ret, return_min=None,
                        return_max=None, num_actors=2, num_learners=1, policy_version=round + 1, sampling_s=0.1,
                        transfer_s=0.0, learning_s=0.1, round_s=0.2, wall_s=0.2, cost_usd=0.0,
                        extras={} if ret is None else {"recent_return_mean": ret})


class FakeTrial:
    def __init__(self, *, prune_below: float) -> None:
        self.reports: list[tuple[int, float]] = []
        self.prune_below = prune_below

    def report(self, value: float, step: int) -> None:
        self.reports.append((step, value))

    def should_prune(self) -> bool:
        return self.reports[-1][1] < self.prune_below


def test_a_round_is_reported_once_every_seed_has_finished_it_as_their_mean() -> None:
    trial = FakeTrial(prune_below=-1.0)
    hook = PruneOnRound(trial=trial, seeds=2)
    assert hook(0, _row(round=0, ret=10.0)) is False and trial.reports == []   # seed 1 has not finished round 0
    assert hook(1, _row(round=0, ret=20.0)) is False and trial.reports == [(0, 15.0)]
    assert hook(0, _row(round=1, ret=None)) is False                             # no episode yet: nothing to say
    assert hook(1, _row(round=1, ret=30.0)) is False and trial.reports == [(0, 15.0)]


def test_the_hook_stops_every_seed_once_the_pruner_says_so() -> None:
    trial = FakeTrial(prune_below=12.0)
    hook = PruneOnRound(trial=trial, seeds=2)
    hook(0, _row(round=0, ret=10.0))
    assert hook(1, _row(round=0, ret=11.0)) is True and hook.pruned
    assert hook(0, _row(round=1, ret=50.0)) is True and len(trial.reports) == 1   # stays stopped, no more reports


def _result(*, final: float | None, evaluated: float | None, cost: float) -> SimpleNamespace:
    return SimpleNamespace(summary=SimpleNamespace(final_return=final, eval_return=evaluated,
                                                   serverless_cost_usd=cost), run_dir=Path("."))


def test_the_score_is_the_mean_over_seeds_of_the_evaluation_else_the_training_return() -> None:
    results = [_result(final=100.0, evaluated=200.0, cost=0.01), _result(final=50.0, evaluated=None, cost=0.02)]
    assert score_of(results=results, objective="return") == pytest.approx((200.0 + 50.0) / 2)
    assert score_of(results=results, objective="return_per_usd") == pytest.approx((200.0 / 0.01 + 50.0 / 0.02) / 2)
    assert score_of(results=[_result(final=None, evaluated=None, cost=0.01)], objective="return") is None
    assert score_of(results=[_result(final=1.0, evaluated=None, cost=0.0)], objective="return_per_usd") is None


def test_a_trials_configs_differ_in_seed_and_name_and_run_under_the_sweep(tmp_path: Path) -> None:
    base = {"name": "cp", "seed": 7, "env": {"id": "CartPole-v1"}, "algo": {"name": "ppo"}}
    configs = trial_configs(base=base, values={"algo.lr": 0.002}, seeds=3, number=4, trials_dir=tmp_path)
    assert [(c.seed, c.name) for c in configs] == [(7, "cp-t4-s0"), (8, "cp-t4-s1"), (9, "cp-t4-s2")]
    assert {c.algo.lr for c in configs} == {0.002} and {c.output.root_dir for c in configs} == {str(tmp_path)}
    assert not any(c.output.report or c.output.status_line for c in configs)


@pytest.mark.parametrize("drawn", [0, 1, 2])
def test_a_trial_a_killed_sweep_left_runs_again_only_with_all_its_values(tmp_path: Path, drawn: int) -> None:
    """A sweep killed between ``ask()`` and drawing its values left a RUNNING trial with some of them: there is
    nothing to run again, so no half-filled trial is queued (it would draw the rest afresh)."""
    import yaml

    from nimbus.sweep.space import parse_space
    from nimbus.sweep.study import Sweep, SweepOptions

    optuna = pytest.importorskip("optuna")
    base = yaml.safe_load((Path(__file__).resolve().parents[3] / "configs" / "ppo-cartpole.yaml").read_text())
    space = parse_space(data={"algo.lr": {"float": [1.0e-4, 3.0e-3]}, "algo.minibatch_size": {"choice": [64, 128]}},
                        base=base)
    first = Sweep(base=base, space=space, sweep_dir=tmp_path, options=SweepOptions(trials=3, seeds=1))
    killed = first.study.ask()
    for dimension in space.dimensions[:drawn]:
        dimension.suggest(trial=killed)
    again = Sweep(base=base, space=space, sweep_dir=tmp_path, options=SweepOptions(trials=3, seeds=1))
    assert again.interrupted() == [killed.number]
    queued = again.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    assert [t.system_attrs.get("fixed_params") for t in queued] == ([killed.params] if drawn == 2 else [])


def test_a_study_that_cannot_take_a_value_leaves_the_trial_training_unpruned() -> None:
    """study.db locked by another program mid-trial: the seeds train on (their runs end with a summary and a
    checkpoint) instead of crashing inside a round."""
    class LockedTrial(FakeTrial):
        def report(self, value: float, step: int) -> None:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")

    hook = PruneOnRound(trial=LockedTrial(prune_below=1e9), seeds=1)
    assert hook(0, _row(round=0, ret=10.0)) is False and hook.storage_failed
    assert hook(0, _row(round=1, ret=10.0)) is False
