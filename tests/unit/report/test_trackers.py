"""Experiment trackers (report/trackers.py): the scalars each tracker stores, read back from its own local format
(W&B's offline .wandb file, MLflow's SQLite store, TensorBoard's event file), equal what was logged; a second
tracker on the same run directory continues the same tracker run (resume)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from nimbus.config.trackers import MlflowConfig, WandbConfig
from nimbus.errors import ConfigError
from nimbus.report.trackers import (
    MlflowTracker,
    RunTrackers,
    TensorBoardTracker,
    WandbTracker,
    flatten,
    make_trackers,
    scalars_of,
)
from nimbus.types import RoundMetrics
from tests.unit.report.tracker_files import wandb_history, wandb_records

CONFIG = {"name": "t", "seed": 3, "algo": {"name": "ppo", "lr": 0.0003}, "env": {"id": "CartPole-v1", "kwargs": {}}}


def _row(k: int) -> RoundMetrics:
    return RoundMetrics(round=k, env_steps=512 * (k + 1), episodes=3 * k, return_mean=None if k == 0 else 10.0 * k,
                        return_min=None, return_max=None, num_actors=2, num_learners=1, policy_version=k + 1,
                        sampling_s=0.5, transfer_s=0.01, learning_s=0.2, round_s=0.75, wall_s=0.75 * (k + 1),
                        cost_usd=0.001 * (k + 1), losses={"policy_loss": -0.01 * k},
                        extras={"hessian_ratio": 1.5, "eval/return_mean": 7.0})


def _logged(rounds: range) -> dict[int, dict[str, float]]:
    return {_row(k).env_steps: scalars_of(row=_row(k), runtime={"cold_starts": float(k)}) for k in rounds}


def _log(tracker, rounds: range) -> None:
    for step, scalars in _logged(rounds).items():
        tracker.log(scalars=scalars, step=step)


def test_scalars_use_the_usual_names() -> None:
    scalars = scalars_of(row=_row(2), runtime={"cold_starts": 1.0})
    assert scalars["charts/episodic_return"] == 20.0 and scalars["losses/policy_loss"] == pytest.approx(-0.02)
    assert scalars["control/hessian_ratio"] == 1.5 and scalars["eval/return_mean"] == 7.0   # own prefix kept
    assert scalars["runtime/cold_starts"] == 1.0 and scalars["cost/usd"] == pytest.approx(0.003)
    assert "charts/episodic_return" not in scalars_of(row=_row(0), runtime={})    # no episode finished yet


def test_flatten_gives_dotted_parameters() -> None:
    assert flatten(config=CONFIG) == {"name": "t", "seed": "3", "algo.name": "ppo", "algo.lr": "0.0003",
                                      "env.id": "CartPole-v1", "env.kwargs": "{}"}


def test_wandb_offline_files_hold_the_logged_scalars_and_a_resume_continues_the_run(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    tracker = WandbTracker(run_dir=tmp_path, config=CONFIG, settings=WandbConfig(project="nimbus-test"))
    _log(tracker, range(0, 3))
    (tmp_path / "summary.json").write_text("{}")
    tracker.finish(artifacts=[tmp_path / "summary.json"])
    first = json.loads((tmp_path / "trackers.json").read_text())["wandb"]["id"]
    time.sleep(1.1)   # W&B names an offline run's directory by the second it starts: a resume is never that quick
    resumed = WandbTracker(run_dir=tmp_path, config=CONFIG, settings=WandbConfig(project="nimbus-test"))
    _log(resumed, range(3, 5))
    resumed.finish(artifacts=[])
    assert json.loads((tmp_path / "trackers.json").read_text())["wandb"]["id"] == first
    assert {r.run.run_id for r in wandb_records(tmp_path) if r.WhichOneof("record_type") == "run"} == {first}
    history = wandb_history(tmp_path)
    expected = _logged(range(0, 5))
    assert sorted(history) == sorted(expected)
    for step, scalars in expected.items():
        assert history[step] == pytest.approx(scalars), step
    config = next(r.run.config for r in wandb_records(tmp_path) if r.WhichOneof("record_type") == "run")
    assert json.loads(next(i.value_json for i in config.update if i.key == "algo")) == CONFIG["algo"]


def test_mlflow_store_holds_the_logged_scalars_parameters_and_artifacts(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    tracker = MlflowTracker(run_dir=tmp_path, config=CONFIG, settings=MlflowConfig())
    _log(tracker, range(0, 3))
    tracker.finish(artifacts=[])
    resumed = MlflowTracker(run_dir=tmp_path, config=CONFIG, settings=MlflowConfig())
    _log(resumed, range(3, 5))
    (tmp_path / "summary.json").write_text('{"final_return": 1}')
    resumed.finish(artifacts=[tmp_path / "summary.json"])
    ids = json.loads((tmp_path / "trackers.json").read_text())["mlflow"]
    client = MlflowClient(tracking_uri=ids["tracking_uri"])
    (run,) = client.search_runs([client.get_experiment_by_name("nimbus").experiment_id])
    assert run.info.run_id == ids["run_id"] and run.info.status == "FINISHED"
    assert run.data.params["algo.lr"] == "0.0003" and run.data.params["env.id"] == "CartPole-v1"
    expected = _logged(range(0, 5))
    for name in expected[max(expected)]:
        history = {m.step: m.value for m in client.get_metric_history(ids["run_id"], name)}
        assert history == pytest.approx({s: v[name] for s, v in expected.items() if name in v}), name
    assert [a.path for a in client.list_artifacts(ids["run_id"])] == ["summary.json"]


def test_tensorboard_events_hold_the_logged_scalars(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = TensorBoardTracker(run_dir=tmp_path)
    _log(tracker, range(0, 3))
    tracker.finish(artifacts=[])
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    expected = _logged(range(0, 3))
    for name in expected[max(expected)]:
        stored = {e.step: e.value for e in events.Scalars(name)}
        assert stored == pytest.approx({s: v[name] for s, v in expected.items() if name in v}), name


def test_a_missing_tracker_package_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name))
                        if name == "wandb" else real_import(name, *a, **k))
    with pytest.raises(ConfigError, match=r"output.loggers: wandb needs the wandb extra"):
        make_trackers(loggers=("wandb",), run_dir=tmp_path, config=CONFIG, wandb=WandbConfig(), mlflow=MlflowConfig())


def test_two_wandb_runs_at_once_stay_apart(tmp_path: Path) -> None:
    """A population's members (run/members.py) each have a W&B run, all active in one process: each gets its own
    rows (W&B's default reinit hands the active run back to the second wandb.init)."""
    pytest.importorskip("wandb")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    first = WandbTracker(run_dir=a, config=CONFIG, settings=WandbConfig(project="nimbus-test"))
    second = WandbTracker(run_dir=b, config=CONFIG, settings=WandbConfig(project="nimbus-test"))
    _log(first, range(0, 2))
    _log(second, range(2, 4))
    first.finish(artifacts=[])
    second.finish(artifacts=[])
    assert sorted(wandb_history(a)) == sorted(_logged(range(0, 2)))
    assert sorted(wandb_history(b)) == sorted(_logged(range(2, 4)))


class _Recorder:
    def __init__(self, *, fail_at: int | None = None) -> None:
        self.steps: list[int] = []
        self.finished: list[tuple[list[str], bool]] = []
        self.fail_at = fail_at

    def log(self, *, scalars, step: int) -> None:
        if step == self.fail_at:
            raise OSError("disk gone")
        self.steps.append(step)

    def finish(self, *, artifacts, failed: bool = False) -> None:
        self.finished.append(([Path(p).name for p in artifacts], failed))


def test_a_tracker_that_fails_to_log_is_dropped_and_the_others_go_on(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    broken, fine = _Recorder(fail_at=1024), _Recorder()
    trackers = RunTrackers(trackers=[broken, fine], artifacts_from=tmp_path)
    for k in range(3):
        trackers.log(row=_row(k), runtime={})
    assert broken.steps == [512] and fine.steps == [512, 1024, 1536]
    assert broken.finished == [([], True)]    # ended at once, as failed
    assert "failed at env step 1024" in caplog.text and "OSError: disk gone" in caplog.text
    (tmp_path / "summary.json").write_text("{}")
    with trackers:
        pass
    trackers.close(failed=True)              # a second close does nothing
    assert fine.finished == [(["summary.json"], False)] and len(broken.finished) == 1


def test_trackers_left_by_an_exception_end_failed_with_what_was_written(tmp_path: Path) -> None:
    recorder = _Recorder()
    (tmp_path / "report.png").write_bytes(b"png")
    with pytest.raises(KeyboardInterrupt), RunTrackers(trackers=[recorder], artifacts_from=tmp_path):
        raise KeyboardInterrupt
    assert recorder.finished == [(["report.png"], True)]


def test_a_failed_run_is_marked_failed_in_mlflow_and_wandb(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    from mlflow.tracking import MlflowClient

    from tests.unit.report.tracker_files import wandb_exit_codes

    mlflow_run = MlflowTracker(run_dir=tmp_path, config=CONFIG, settings=MlflowConfig())
    wandb_run = WandbTracker(run_dir=tmp_path, config=CONFIG, settings=WandbConfig(project="nimbus-test"))
    for tracker in (mlflow_run, wandb_run):
        tracker.finish(artifacts=[], failed=True)
    ids = json.loads((tmp_path / "trackers.json").read_text())
    assert MlflowClient(tracking_uri=ids["mlflow"]["tracking_uri"]).get_run(ids["mlflow"]["run_id"]).info.status \
        == "FAILED"
    assert wandb_exit_codes(tmp_path) == [1]


def test_a_tracker_that_cannot_start_closes_those_already_open(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import nimbus.report.trackers as trackers_module

    opened = _Recorder()
    made = iter([opened])

    def make(*, name: str, **_: object):
        if name == "mlflow":
            raise ConnectionError("tracking server down")
        return next(made)

    monkeypatch.setattr(trackers_module, "_make", make)
    with pytest.raises(ConfigError, match=r"output\.loggers: mlflow could not start \(ConnectionError: tracking "
                                          r"server down\)"):
        make_trackers(loggers=("tensorboard", "mlflow"), run_dir=tmp_path, config=CONFIG, wandb=WandbConfig(),
                      mlflow=MlflowConfig())
    assert opened.finished == [([], True)]
