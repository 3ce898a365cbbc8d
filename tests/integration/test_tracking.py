"""Experiment trackers end to end (issue 29 item 1): PPO CartPole on the local backend with ``output.loggers:
[tensorboard, wandb, mlflow]``; each tracker's own local store (TensorBoard's event file, W&B's offline run file,
MLflow's SQLite store) is read back and compared with metrics.jsonl row by row, under the documented names
(docs/tracking.md, written out here rather than taken from report/trackers.py); the resolved config and the
artifacts (summary.json, report.png) are there. A run ended by an exception leaves its tracker runs failed; one
stopped by SIGINT finishes them with the artifacts. The runs are inline (runtime/inline.py): the subject is what
the trackers store, which the driver writes whatever backend computed the rows; a forked pool cost each run ~3 s
of fork-server start-up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from tests.integration.conftest import REPO, cartpole_config
from tests.unit.report.tracker_files import wandb_config, wandb_exit_codes, wandb_history, wandb_saved_files

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

ROUNDS = 4
INLINE = "runtime.backend=inline"
OWN_NAME = ("eval/", "staleness/")   # extras under their own name; every other extra under control/


def expected_scalars(row: dict[str, Any]) -> dict[str, float]:
    """A metrics.jsonl row under the trackers' names (docs/tracking.md)."""
    scalars = {"charts/num_actors": row["num_actors"], "charts/num_learners": row["num_learners"],
               "charts/policy_version": row["policy_version"],
               "charts/steps_per_second": row["env_steps"] / row["wall_s"],
               "time/sampling_s": row["sampling_s"], "time/transfer_s": row["transfer_s"],
               "time/learning_s": row["learning_s"], "time/round_s": row["round_s"], "cost/usd": row["cost_usd"]}
    if row["return_mean"] is not None:
        scalars["charts/episodic_return"] = row["return_mean"]
    scalars |= {f"losses/{k}": v for k, v in row["losses"].items()}
    scalars |= {(k if k.startswith(OWN_NAME) else f"control/{k}"): v for k, v in row["extras"].items()}
    scalars |= {f"runtime/{k}": v for k, v in row["runtime"].items()}
    return {name: float(value) for name, value in scalars.items()}


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[dict[str, Any]]]:
    config = cartpole_config(tmp_path=tmp_path_factory.mktemp("runs"),
                             overrides=[f"train.max_rounds={ROUNDS}", "output.report=true", INLINE,
                                        "output.loggers=[tensorboard, wandb, mlflow]",
                                        "output.wandb.project=nimbus-test"])
    result = train(config=config)
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    assert len(rows) == ROUNDS and rows[0]["losses"] and rows[-1]["runtime"]   # something to compare
    return result, rows


def test_tensorboard_events_equal_metrics_jsonl(tracked) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result, rows = tracked
    events = EventAccumulator(str(result.run_dir), size_guidance={"scalars": 0})
    events.Reload()
    stored: dict[int, dict[str, float]] = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            stored.setdefault(event.step, {})[tag] = event.value
    assert sorted(stored) == [row["env_steps"] for row in rows]
    for row in rows:   # float32 in the event file
        assert stored[row["env_steps"]] == pytest.approx(expected_scalars(row), rel=1e-6), row["round"]


def test_wandb_offline_run_equals_metrics_jsonl_with_config_and_artifacts(tracked) -> None:
    result, rows = tracked
    history = wandb_history(result.run_dir)
    assert sorted(history) == [row["env_steps"] for row in rows]
    for row in rows:
        assert history[row["env_steps"]] == pytest.approx(expected_scalars(row), rel=1e-12), row["round"]
    assert wandb_config(result.run_dir) == json.loads(json.dumps(result_config(result)))
    assert {"summary.json", "report.png"} <= wandb_saved_files(result.run_dir)
    (run_files,) = result.run_dir.glob("wandb/offline-run-*/files")
    assert json.loads((run_files / "summary.json").read_text()) == json.loads((result.run_dir / "summary.json")
                                                                              .read_text())
    assert wandb_exit_codes(result.run_dir) == [0]


def result_config(result: Any) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((result.run_dir / "config.yaml").read_text())


def test_mlflow_store_equals_metrics_jsonl_with_parameters_and_artifacts(tracked) -> None:
    from mlflow.tracking import MlflowClient

    result, rows = tracked
    ids = json.loads((result.run_dir / "trackers.json").read_text())["mlflow"]
    assert ids["tracking_uri"] == f"sqlite:///{result.run_dir.resolve() / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=ids["tracking_uri"])
    run = client.get_run(ids["run_id"])
    assert run.info.status == "FINISHED"
    stored: dict[int, dict[str, float]] = {}
    for name in run.data.metrics:
        for metric in client.get_metric_history(ids["run_id"], name):
            stored.setdefault(metric.step, {})[name] = metric.value
    assert sorted(stored) == [row["env_steps"] for row in rows]
    for row in rows:
        assert stored[row["env_steps"]] == pytest.approx(expected_scalars(row), rel=1e-12), row["round"]
    config = result_config(result)
    assert run.data.params["algo.lr"] == json.dumps(config["algo"]["lr"])
    assert run.data.params["env.id"] == config["env"]["id"] == "CartPole-v1"
    assert run.data.params["output.loggers"] == '["tensorboard", "wandb", "mlflow"]'
    assert len(run.data.params) == _leaves(config)
    assert sorted(a.path for a in client.list_artifacts(ids["run_id"])) == ["report.png", "summary.json"]
    (summary,) = (result.run_dir / "mlartifacts").rglob("summary.json")
    assert summary.read_text() == (result.run_dir / "summary.json").read_text()


def _leaves(config: dict[str, Any]) -> int:
    return sum(_leaves(v) if isinstance(v, dict) and v else 1 for v in config.values())


def test_a_run_ended_by_an_exception_leaves_its_tracker_runs_failed(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    config = cartpole_config(tmp_path=tmp_path, overrides=[
        "env.id=nimbus/RaisingCartPole-v0", "actors.function.max_retries=0", "output.loggers=[wandb, mlflow]", INLINE,
        "output.wandb.project=nimbus-test"])
    with pytest.raises(Exception, match="injected error on every step"):
        train(config=config)
    (run_dir,) = tmp_path.iterdir()
    ids = json.loads((run_dir / "trackers.json").read_text())
    assert MlflowClient(tracking_uri=ids["mlflow"]["tracking_uri"]).get_run(ids["mlflow"]["run_id"]).info.status \
        == "FAILED"
    assert wandb_exit_codes(run_dir) == [1]


def test_sigint_finishes_the_tracker_runs_with_every_round_and_the_artifacts(tmp_path: Path) -> None:
    """Ctrl-C stops the run cleanly (final checkpoint, summary, report): the MLflow run is finished, not failed,
    holds every round of metrics.jsonl and the artifacts."""
    from mlflow.tracking import MlflowClient

    sets = [f"output.root_dir={tmp_path}", "output.loggers=[mlflow]", "output.report=true",
            "output.status_line=false", "train.eval_episodes=0", "train.total_env_steps=10000000", INLINE]
    driver = subprocess.Popen([sys.executable, "-m", "nimbus.cli", "train", str(REPO / "configs/ppo-cartpole.yaml"),
                               *[item for s in sets for item in ("--set", s)]], stderr=subprocess.PIPE, text=True,
                              env=os.environ.copy())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and \
            not any(len(read_metrics(path=p)) >= 3 for p in tmp_path.glob("*/metrics.jsonl")):
        time.sleep(0.2)
    driver.send_signal(signal.SIGINT)
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 0, stderr
    (run_dir,) = tmp_path.iterdir()
    rows = read_metrics(path=run_dir / "metrics.jsonl")
    ids = json.loads((run_dir / "trackers.json").read_text())["mlflow"]
    client = MlflowClient(tracking_uri=ids["tracking_uri"])
    assert client.get_run(ids["run_id"]).info.status == "FINISHED"
    history = {m.step: m.value for m in client.get_metric_history(ids["run_id"], "cost/usd")}
    assert history == pytest.approx({row["env_steps"]: row["cost_usd"] for row in rows}) and len(rows) >= 3
    assert sorted(a.path for a in client.list_artifacts(ids["run_id"])) == ["report.png", "summary.json"]


def test_resume_continues_the_same_tracker_runs(tmp_path: Path) -> None:
    """``--resume`` (train(resume_from=RUN_DIR)) logs on into the same MLflow and W&B runs (ids in trackers.json):
    their rows are every row of metrics.jsonl, both sessions'."""
    from mlflow.tracking import MlflowClient

    from tests.unit.report.tracker_files import wandb_records

    def config(rounds: int):
        return cartpole_config(tmp_path=tmp_path, overrides=[f"train.max_rounds={rounds}", INLINE,
                                                             "output.loggers=[mlflow, wandb]",
                                                             "output.wandb.project=nimbus-test"])

    first = train(config=config(2))
    ids = json.loads((first.run_dir / "trackers.json").read_text())
    resumed = train(config=config(4), resume_from=first.run_dir)
    assert resumed.run_dir == first.run_dir and json.loads((first.run_dir / "trackers.json").read_text()) == ids
    rows = read_metrics(path=first.run_dir / "metrics.jsonl")
    assert len(rows) == 4
    client = MlflowClient(tracking_uri=ids["mlflow"]["tracking_uri"])
    (run,) = client.search_runs([client.get_experiment_by_name("nimbus").experiment_id])
    assert run.info.run_id == ids["mlflow"]["run_id"] and run.info.status == "FINISHED"
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "charts/policy_version")}
    assert history == {row["env_steps"]: row["policy_version"] for row in rows}
    assert {r.run.run_id for r in wandb_records(first.run_dir) if r.WhichOneof("record_type") == "run"} \
        == {ids["wandb"]["id"]}
    assert sorted(wandb_history(first.run_dir)) == [row["env_steps"] for row in rows]


POPULATION = ["train.max_rounds=2", INLINE, "algo.minibatch_size=64", "actors.scaling={kind: fixed, num_actors: 1}",
              "pbt={members: 2, interval_rounds: 1, fraction: 0.5, "
              "hyperparameters: {lr: {low: 1.0e-5, high: 1.0e-2, log: true}}}",
              "output.loggers=[wandb, mlflow]", "output.wandb.project=nimbus-test", "output.report=true"]


def test_each_population_member_has_its_own_tracker_runs(tmp_path: Path) -> None:
    """run/members.py: one W&B and one MLflow run per member (both W&B runs active at once), each holding that
    member's metrics.jsonl, with the population's files as artifacts."""
    from mlflow.tracking import MlflowClient

    result = train(config=cartpole_config(tmp_path=tmp_path, overrides=POPULATION))
    wandb_ids = set()
    for member in ("member0", "member1"):
        member_dir = result.run_dir / "policies" / member
        rows = read_metrics(path=member_dir / "metrics.jsonl")
        history = wandb_history(member_dir)
        assert sorted(history) == [row["env_steps"] for row in rows] and len(rows) == 2
        for row in rows:
            assert history[row["env_steps"]] == pytest.approx(expected_scalars(row), rel=1e-12)
        ids = json.loads((member_dir / "trackers.json").read_text())
        wandb_ids.add(ids["wandb"]["id"])
        client = MlflowClient(tracking_uri=ids["mlflow"]["tracking_uri"])
        assert {m.step: m.value for m in client.get_metric_history(ids["mlflow"]["run_id"], "cost/usd")} \
            == pytest.approx({row["env_steps"]: row["cost_usd"] for row in rows})
        assert sorted(a.path for a in client.list_artifacts(ids["mlflow"]["run_id"])) == \
            ["population.json", "report.png", "summary.json"]
        assert wandb_exit_codes(member_dir) == [0]
    assert len(wandb_ids) == 2


def test_each_workload_has_its_own_tracker_run(make_two_workloads) -> None:
    """run/workloads.py: two workloads on one pool, each logging its own rows to its own MLflow run."""
    from mlflow.tracking import MlflowClient

    from nimbus.run.workloads import train_workloads

    results = train_workloads(configs=make_two_workloads(["train.max_rounds=2", "output.loggers=[mlflow]", INLINE]))
    for result in results:
        rows = read_metrics(path=result.run_dir / "metrics.jsonl")
        ids = json.loads((result.run_dir / "trackers.json").read_text())["mlflow"]
        client = MlflowClient(tracking_uri=ids["tracking_uri"])
        assert client.get_run(ids["run_id"]).info.status == "FINISHED"
        assert {m.step: m.value for m in client.get_metric_history(ids["run_id"], "charts/policy_version")} \
            == {row["env_steps"]: row["policy_version"] for row in rows} and len(rows) == 2
        assert [a.path for a in client.list_artifacts(ids["run_id"])] == ["summary.json"]
