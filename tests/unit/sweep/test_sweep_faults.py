"""A sweep under faults, with the training replaced by a fake (the study, the lock and the space are real): a
signal stops the sweep as a whole and its trial runs again on resume, unscored; values refused together fail their
trial once; a resumed sweep draws new values; one sweep per study; a bad study.db is a clear error; the space file
goes through the guarded YAML loader."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest

from nimbus.errors import ConfigError
from nimbus.run.rundir import hold_lock
from nimbus.sweep.study import SweepOptions, run_sweep

optuna = pytest.importorskip("optuna")
CONFIG = Path(__file__).resolve().parents[3] / "configs" / "ppo-cartpole.yaml"


def _space(tmp_path: Path, text: str = "algo.lr: {float: [1e-4, 1e-2], log: true}\n") -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


class FakeTraining:
    """Each trial's seeds "train": a return of 100 × lr per seed; ``stop_with`` makes one trial end by a signal."""

    def __init__(self, *, stop_with: dict[int, str] | None = None) -> None:
        self.calls: list[float] = []
        self.stop_with = stop_with or {}

    def __call__(self, *, configs, after_round) -> list:
        lr = configs[0].algo.lr
        stopped = self.stop_with.get(len(self.calls), "max_rounds")
        self.calls.append(lr)
        return [SimpleNamespace(run_dir=Path("."), summary=SimpleNamespace(
            final_return=100 * lr, eval_return=None, serverless_cost_usd=0.01, stopped_by=stopped)) for _ in configs]


def _sweep(tmp_path: Path, *, trials: int, training, space: Path | None = None,
           lock_wait_s: float = SweepOptions.lock_wait_s):
    return run_sweep(config_path=CONFIG, space_path=space or _space(tmp_path), sweep_dir=tmp_path / "sweep",
                     options=SweepOptions(trials=trials, seeds=2, lock_wait_s=lock_wait_s), train_seeds=training)


def _states(tmp_path: Path) -> list[str]:
    study = optuna.load_study(study_name="nimbus", storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}")
    return [t.state.name for t in study.trials]


def test_a_signal_stops_the_sweep_and_its_trial_runs_again_unscored(tmp_path: Path) -> None:
    training = FakeTraining(stop_with={1: "SIGINT"})
    stopped = _sweep(tmp_path, trials=4, training=training)
    assert stopped.interrupted_by == "SIGINT" and stopped.finished == 1 and len(training.calls) == 2
    assert _states(tmp_path) == ["COMPLETE", "FAIL", "WAITING"]
    resumed = _sweep(tmp_path, trials=4, training=FakeTraining())
    assert resumed.interrupted_by is None and resumed.finished == 4
    study = optuna.load_study(study_name="nimbus", storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}")
    assert study.trials[2].params == study.trials[1].params and study.trials[2].state.name == "COMPLETE"


def test_values_refused_together_fail_their_trial_once(tmp_path: Path) -> None:
    """Values that pass the space's check one by one but that the config (or the env) refuses together: the trial
    fails and the sweep goes on to other values instead of exiting 2 on the same values at every rerun."""
    space = _space(tmp_path, "algo.lr: {float: [1e-4, 1e-2]}\n")

    def refuse_first(*, configs, after_round):
        if not hasattr(refuse_first, "done"):
            refuse_first.done = True
            raise ConfigError("invalid config:\nalgo.minibatch_size: larger than a round's rows")
        return FakeTraining()(configs=configs, after_round=after_round)

    result = _sweep(tmp_path, trials=3, training=refuse_first, space=space)
    assert result.finished == 3 and _states(tmp_path) == ["FAIL", "COMPLETE", "COMPLETE"]


def test_a_resumed_sweep_draws_new_values(tmp_path: Path) -> None:
    first = FakeTraining()
    _sweep(tmp_path, trials=3, training=first)
    then = FakeTraining()
    _sweep(tmp_path, trials=6, training=then)
    assert len(then.calls) == 3 and not set(then.calls) & set(first.calls)


def _hold(directory: str, ready, release) -> None:
    with hold_lock(directory=Path(directory), what="sweep directory", hint=""):
        ready.set()
        release.wait(30)


def test_one_sweep_per_study_names_the_holder(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    ready, release = context.Event(), context.Event()
    holder = context.Process(target=_hold, args=(str(tmp_path / "sweep"), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        with pytest.raises(ConfigError, match=rf"in use by another nimbus process \(pid {holder.pid}\)"):
            _sweep(tmp_path, trials=1, training=FakeTraining())
    finally:
        release.set()
        holder.join(30)


def test_a_corrupt_study_db_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "study.db").write_bytes(os.urandom(4096))
    with pytest.raises(ConfigError, match=r"study\.db: cannot open the sweep's study"):
        _sweep(tmp_path, trials=1, training=FakeTraining())


def test_the_space_file_takes_yaml_1_2_numbers_and_refuses_an_alias_bomb(tmp_path: Path) -> None:
    space = _space(tmp_path, "algo.lr: {float: [1e-4, 1e-2]}\n")
    result = _sweep(tmp_path, trials=1, training=FakeTraining(), space=space)
    assert result.finished == 1
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    with pytest.raises(ConfigError, match="expands to more than"):
        _sweep(tmp_path, trials=1, training=FakeTraining(), space=_space(tmp_path, bomb))


def test_a_killed_sweep_resumes_rerunning_its_trial_and_counts_it_once(tmp_path: Path) -> None:
    """The fast twin of the integration test's SIGKILL: the process dies inside trial 1 (left RUNNING in study.db);
    the same command then runs trial 1's values again first, does not count the dead trial, and stops at N."""
    class Killed(BaseException):
        pass

    def die_in_second_trial(*, configs, after_round):
        if len(first.calls) == 1:
            raise Killed()
        return first(configs=configs, after_round=after_round)

    first = FakeTraining()
    with pytest.raises(Killed):
        _sweep(tmp_path, trials=3, training=die_in_second_trial)
    study = optuna.load_study(study_name="nimbus", storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}")
    killed = study.trials[1]
    assert killed.state.name == "RUNNING"
    again = FakeTraining()
    result = _sweep(tmp_path, trials=3, training=again)
    assert result.finished == 3 and len(again.calls) == 2
    assert again.calls[0] == pytest.approx(killed.params["algo.lr"])
    study = optuna.load_study(study_name="nimbus", storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert study.user_attrs["interrupted"] == [1]


def test_the_sweep_says_when_each_trial_starts_and_how_it_ended(tmp_path: Path) -> None:
    said: list[str] = []
    run_sweep(config_path=CONFIG, space_path=_space(tmp_path), sweep_dir=tmp_path / "sweep",
              options=SweepOptions(trials=2, seeds=2), train_seeds=FakeTraining(stop_with={1: "SIGTERM"}),
              say=said.append)
    assert said[0] == "trial 1 of 2: training 2 seed(s)" and said[1].startswith("trial 0: return ")
    assert "algo.lr=" in said[1] and said[3] == "trial 1: stopped by SIGTERM, not counted"


def test_ctrl_c_while_a_trials_runs_are_built_stops_the_sweep_the_same_way(tmp_path: Path) -> None:
    def interrupted(*, configs, after_round):
        raise KeyboardInterrupt

    result = _sweep(tmp_path, trials=3, training=interrupted)
    assert result.interrupted_by == "SIGINT" and _states(tmp_path) == ["FAIL", "WAITING"]


def test_a_study_locked_when_a_trial_s_result_is_recorded_is_a_clear_error_and_the_trial_runs_again(
        tmp_path: Path) -> None:
    """Another program takes study.db's lock while trial 0 trains: recording its result is exit 2 naming the file
    (not SQLAlchemy's traceback); once the lock is gone the same command runs trial 0's values again."""
    holder: list[sqlite3.Connection] = []

    def lock_while_training(*, configs, after_round):
        connection = sqlite3.connect(tmp_path / "sweep" / "study.db", isolation_level=None)
        connection.execute("BEGIN EXCLUSIVE")
        holder.append(connection)
        return first(configs=configs, after_round=after_round)

    first = FakeTraining()
    try:
        with pytest.raises(ConfigError, match=r"study\.db: the sweep's study could not be read or written "
                                              r"\(OperationalError: .*database is locked.*runs again"):
            # the lock is held until the error, so any wait ends in "database is locked": a short one will do
            _sweep(tmp_path, trials=2, training=lock_while_training, lock_wait_s=0.2)
    finally:
        holder[0].rollback()
        holder[0].close()
    again = FakeTraining()
    assert _sweep(tmp_path, trials=2, training=again).finished == 2
    assert again.calls[0] == pytest.approx(first.calls[0])
    assert _states(tmp_path) == ["FAIL", "COMPLETE", "COMPLETE"]


class PickySize(gym.Env):
    """An env whose constructor refuses a value of its keyword with an assert (as LunarLander's gravity does)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, size: int = 1) -> None:
        assert size > 0, f"size must be positive, got {size}"


def test_an_env_refusing_a_keyword_s_value_fails_that_trial_once_and_the_sweep_goes_on(tmp_path: Path) -> None:
    from nimbus.envs.make import make_env

    gym.register(id="nimbus-test/PickySize-v0", entry_point=PickySize)
    training = FakeTraining()

    def make_the_envs(*, configs, after_round):   # as the workflow's build does, before any worker starts
        for config in configs:
            make_env(env_id="nimbus-test/PickySize-v0", seed=config.seed, kwargs=config.env.kwargs).close()
        return training(configs=configs, after_round=after_round)

    space = _space(tmp_path, "env.kwargs.size: {int: [-3, -1]}\n")
    result = _sweep(tmp_path, trials=2, training=make_the_envs, space=space)
    assert result.finished == 2 and training.calls == [] and _states(tmp_path) == ["FAIL", "FAIL"]
    study = optuna.load_study(study_name="nimbus", storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}")
    size = study.trials[0].params["env.kwargs.size"]
    assert f"env.kwargs: nimbus-test/PickySize-v0 could not be built with size={size} (AssertionError: size must " \
           f"be positive, got {size})" in study.trials[0].user_attrs["refused"]
