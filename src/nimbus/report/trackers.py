"""Experiment trackers: TensorBoard, Weights & Biases and MLflow get the same scalars every round.

``output.loggers`` names them (config/sections.py OutputConfig, config/trackers.py; docs/tracking.md). The run
loop (run/loop.py, run/members.py, run/workloads.py) opens one ``RunTrackers`` per run directory (a population's
member or a workload has its own) once the workflow is built, logs each round's row through it right after
metrics.jsonl (run/rounds.py ``RoundHook``), and closes it on every exit path: after summary.json and report.png
are written (uploaded as artifacts), or with the run marked failed when an exception ends it.

Each round's scalars (``scalars_of``: ``charts/episodic_return``, ``losses/*``, ``cost/usd``, ``time/*``,
``runtime/*``, controller signals under ``control/``) go to every tracker with the env steps as the step. The
resolved config is the tracker run's config (W&B) or its parameters (MLflow, flattened to ``a.b.c`` keys); at
the end ``report.png`` and ``summary.json`` are uploaded as artifacts. A resumed run continues the same tracker
run: the tracker run ids are kept in ``RUN_DIR/trackers.json``. A tracker that raises while logging is warned
about once and dropped for the rest of the run (metrics.jsonl has every row); training goes on — except a full
disk (ENOSPC, EDQUOT), which stops the run (the CLI's one "disk full" line, exit 1): metrics.jsonl and the
checkpoints are on that disk too.

W&B defaults to offline mode (files under ``RUN_DIR/wandb``; ``wandb sync RUN_DIR/wandb/offline-run-*`` uploads
them later); MLflow defaults to a SQLite store in the run directory (``sqlite:///RUN_DIR/mlflow.db``, artifacts
under ``RUN_DIR/mlartifacts``), or any tracking URI. Both are optional extras (``pip install nimbus-rl[wandb]``,
``[mlflow]``): naming one that is not installed exits 2 when the config is loaded (config/trackers.py).

Example::

    with RunTrackers.open(output=config.output, run_dir=run_dir, config=config.model_dump(mode="json")) as trackers:
        trackers.log(row=row, runtime={"cold_starts": 2.0})     # every round
        ...                                                      # summary.json and report.png written
    # left: summary.json and report.png uploaded, every tracker run ended (failed when an exception left)
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nimbus.config.trackers import Logger, MlflowConfig, WandbConfig
from nimbus.errors import ConfigError
from nimbus.types import RoundMetrics

if TYPE_CHECKING:
    from nimbus.config.sections import OutputConfig

log = logging.getLogger(__name__)

IDS_FILE = "trackers.json"
OWN_PREFIXES = ("staleness/", "eval/")   # extras logged under their own name, not control/
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# MLflow's own HTTP defaults retry an unreachable server for minutes (7 retries, backoff 2, 120 s timeout) before the
# run may start; these bound a tracker that cannot start to seconds (a user's environment variables still win)
MLFLOW_HTTP_BOUNDS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                      "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
# W&B online waits 90 s (+10 s of grace) for a server that does not answer before wandb.init gives up; a start that
# takes longer than this is a server the run cannot log to (WANDB_INIT_TIMEOUT, when set, still wins)
WANDB_INIT_TIMEOUT_S = 15.0


class Tracker(Protocol):
    def log(self, *, scalars: Mapping[str, float], step: int) -> None: ...

    def finish(self, *, artifacts: Sequence[Path], failed: bool = False) -> None: ...


def scalars_of(*, row: RoundMetrics, runtime: Mapping[str, float]) -> dict[str, float]:
    """A round's scalars under their tracker names (TensorBoard's usual scheme)."""
    scalars = {"charts/num_actors": row.num_actors, "charts/num_learners": row.num_learners,
               "charts/policy_version": row.policy_version, "time/sampling_s": row.sampling_s,
               "time/transfer_s": row.transfer_s, "time/learning_s": row.learning_s,
               "time/round_s": row.round_s, "cost/usd": row.cost_usd,
               "charts/steps_per_second": row.env_steps / max(row.wall_s, 1e-9)}
    if row.return_mean is not None:
        scalars["charts/episodic_return"] = row.return_mean
    scalars.update({f"losses/{k}": v for k, v in row.losses.items()})
    scalars.update({k if k.startswith(OWN_PREFIXES) else f"control/{k}": v for k, v in row.extras.items()})
    scalars.update({f"runtime/{k}": v for k, v in runtime.items()})
    return {name: float(value) for name, value in scalars.items()}


def flatten(*, config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"algo": {"lr": 3e-4}}`` → ``{"algo.lr": "0.0003"}``: the config as MLflow parameters."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(config=value, prefix=f"{name}."))
        else:
            flat[name] = json.dumps(value, default=str) if not isinstance(value, str) else value
    return flat


def _load_ids(run_dir: Path) -> dict[str, Any]:
    path = run_dir / IDS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def _save_id(run_dir: Path, *, tracker: str, value: dict[str, Any]) -> None:
    ids = _load_ids(run_dir) | {tracker: value}
    tmp = run_dir / f".{IDS_FILE}.tmp"
    tmp.write_text(json.dumps(ids, indent=2))
    os.replace(tmp, run_dir / IDS_FILE)


def _quiet_event_writer_threads() -> None:
    """TensorBoard's writer thread keeps an exception (a full disk, say) for the driver's next write, flush or close,
    where nimbus reports it (a full disk: one line, cli.py), and also lets it escape the thread, which printed a
    thread traceback before that line. ``threading.excepthook`` skips it for those threads alone; installed once."""
    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

    previous = threading.excepthook
    if getattr(previous, "skips", None) is _AsyncWriterThread:
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if not isinstance(args.thread, _AsyncWriterThread):
            previous(args)

    hook.skips = _AsyncWriterThread  # type: ignore[attr-defined]
    threading.excepthook = hook


class TensorBoardTracker:
    """Event files in the run directory: one Summary per round (one event, not one per scalar: ~2.5 ms a round)."""

    def __init__(self, *, run_dir: Path) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary
        from torch.utils.tensorboard.writer import FileWriter

        _quiet_event_writer_threads()
        self._summary = Summary
        self._writer = FileWriter(log_dir=str(run_dir))

    def log(self, *, scalars: Mapping[str, float], step: int) -> None:
        values = [self._summary.Value(tag=name, simple_value=float(v)) for name, v in scalars.items()]
        self._writer.add_summary(self._summary(value=values), global_step=step)

    def finish(self, *, artifacts: Sequence[Path], failed: bool = False) -> None:
        self._writer.close()


class WandbTracker:
    """A W&B run (offline by default) whose id is kept in trackers.json, so a resumed run continues it."""

    def __init__(self, *, run_dir: Path, config: Mapping[str, Any], settings: WandbConfig) -> None:
        wandb = _optional("wandb", logger="wandb")
        run_id = _load_ids(run_dir).get("wandb", {}).get("id") or uuid.uuid4().hex[:8]
        os.environ.setdefault("WANDB_SILENT", "true")
        # create_new: a population's members are W&B runs of their own, all active at once in this process (W&B's
        # default hands back the active run instead)
        self._run = wandb.init(project=settings.project, entity=settings.entity, mode=settings.mode, id=run_id,
                               resume="allow", dir=str(run_dir), name=run_dir.name, config=dict(config),
                               reinit="create_new", settings=_wandb_bounds(wandb=wandb))
        _save_id(run_dir, tracker="wandb", value={"id": run_id, "mode": settings.mode})

    def log(self, *, scalars: Mapping[str, float], step: int) -> None:
        self._run.log(dict(scalars), step=step)

    def finish(self, *, artifacts: Sequence[Path], failed: bool = False) -> None:
        for path in artifacts:
            if Path(path).exists():
                self._run.save(str(path), base_path=str(Path(path).parent), policy="now")
        self._run.finish(exit_code=1 if failed else 0)


class MlflowTracker:
    """An MLflow run (SQLite store in the run directory by default) continued on resume."""

    def __init__(self, *, run_dir: Path, config: Mapping[str, Any], settings: MlflowConfig) -> None:
        mlflow = _optional("mlflow", logger="mlflow")
        from mlflow.tracking import MlflowClient

        uri = settings.tracking_uri or f"sqlite:///{run_dir.resolve() / 'mlflow.db'}"
        _check_reachable(uri=uri)
        self._client, self._metric = MlflowClient(tracking_uri=uri), mlflow.entities.Metric
        saved = _load_ids(run_dir).get("mlflow", {})
        if saved.get("run_id") and saved.get("tracking_uri") == uri:
            self._run_id = saved["run_id"]
            self._client.update_run(self._run_id, status="RUNNING")
        else:
            self._run_id = self._start(run_dir=run_dir, config=config, settings=settings, mlflow=mlflow)
            _save_id(run_dir, tracker="mlflow", value={"run_id": self._run_id, "tracking_uri": uri})

    def _start(self, *, run_dir: Path, config: Mapping[str, Any], settings: MlflowConfig, mlflow: Any) -> str:
        experiment = self._client.get_experiment_by_name(settings.experiment)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            location = None if settings.tracking_uri else (run_dir.resolve() / "mlartifacts").as_uri()
            experiment_id = self._client.create_experiment(settings.experiment, artifact_location=location)
        run_id = self._client.create_run(experiment_id, run_name=run_dir.name).info.run_id
        params = [mlflow.entities.Param(k, v[:6000]) for k, v in flatten(config=config).items()]
        for start in range(0, len(params), 100):   # MLflow takes at most 100 parameters a batch
            self._client.log_batch(run_id, params=params[start:start + 100])
        return run_id

    def log(self, *, scalars: Mapping[str, float], step: int) -> None:
        metrics = [self._metric(key=name, value=value, timestamp=0, step=step) for name, value in scalars.items()]
        self._client.log_batch(self._run_id, metrics=metrics)

    def finish(self, *, artifacts: Sequence[Path], failed: bool = False) -> None:
        for path in artifacts:
            if Path(path).exists():
                self._client.log_artifact(self._run_id, str(path))
        self._client.set_terminated(self._run_id, status="FAILED" if failed else "FINISHED")


def _wandb_bounds(*, wandb: Any) -> Any:
    """W&B's settings with its start-up bounded by ``WANDB_INIT_TIMEOUT_S`` (none when the user set
    WANDB_INIT_TIMEOUT: W&B reads it itself)."""
    if os.environ.get("WANDB_INIT_TIMEOUT"):
        return None
    return wandb.Settings(init_timeout=WANDB_INIT_TIMEOUT_S)


def _check_reachable(*, uri: str) -> None:
    """Fail at once where MLflow would retry for minutes: a SQLite store that cannot be written (its engine is
    retried 10 times with back-off), an HTTP server (retries bounded by ``MLFLOW_HTTP_BOUNDS``)."""
    for name, value in MLFLOW_HTTP_BOUNDS.items():
        os.environ.setdefault(name, value)
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri[len("sqlite:///"):])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise ConfigError(f"output.mlflow.tracking_uri: cannot write the MLflow store {path} "
                          f"({exc.strerror or exc})") from None


def _optional(module: str, *, logger: str) -> Any:
    try:
        return __import__(module)
    except ImportError as exc:
        raise ConfigError(f"output.loggers: {logger} needs the {logger} extra (pip install 'nimbus-rl[{logger}]'): "
                          f"{exc}") from None


def _make(*, name: str, run_dir: Path, config: Mapping[str, Any], wandb: WandbConfig, mlflow: MlflowConfig) -> Tracker:
    if name == "tensorboard":
        return TensorBoardTracker(run_dir=run_dir)
    if name == "wandb":
        return WandbTracker(run_dir=run_dir, config=config, settings=wandb)
    return MlflowTracker(run_dir=run_dir, config=config, settings=mlflow)


def make_trackers(*, loggers: Sequence[Logger], run_dir: Path, config: Mapping[str, Any], wandb: WandbConfig,
                  mlflow: MlflowConfig) -> list[Tracker]:
    """One tracker per name in ``output.loggers``, in order; when one cannot start, those made are closed."""
    made: list[Tracker] = []
    try:
        for name in dict.fromkeys(loggers):
            try:
                made.append(_make(name=name, run_dir=run_dir, config=config, wandb=wandb, mlflow=mlflow))
            except ConfigError:
                raise
            except Exception as exc:   # one line naming the tracker, not the tracker library's traceback
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                raise ConfigError(f"output.loggers: {name} could not start ({type(exc).__name__}: {first}); "
                                  f"check output.{name}, or leave {name} out of output.loggers") from None
    except BaseException:
        for tracker in made:
            _finish_quietly(tracker=tracker, artifacts=[], failed=True)
        raise
    return made


def _finish_quietly(*, tracker: Tracker, artifacts: Sequence[Path], failed: bool) -> None:
    try:
        tracker.finish(artifacts=artifacts, failed=failed)
    except Exception as exc:   # one tracker's failure to close must not keep the others open
        log.warning("output.loggers: closing %s failed (%s: %s)", type(tracker).__name__, type(exc).__name__, exc)


class RunTrackers:
    """The trackers of one run directory, opened by the run loop: ``log`` every round, closed once (a context
    manager: on leaving, the files of ``artifacts_from`` in ``ARTIFACTS`` are uploaded and the tracker run is
    marked failed when an exception is leaving). A tracker that raises in ``log`` is warned about and dropped."""

    ARTIFACTS = ("summary.json", "report.png", "population.json")

    def __init__(self, *, trackers: Sequence[Tracker], artifacts_from: Path) -> None:
        self.trackers, self.artifacts_from, self.closed = list(trackers), Path(artifacts_from), False

    @classmethod
    def open(cls, *, output: OutputConfig, run_dir: Path, config: Mapping[str, Any],
             artifacts_from: Path | None = None) -> RunTrackers:
        """``output.loggers``' trackers for ``run_dir``; ``config``: the resolved config, as JSON-ready data."""
        made = make_trackers(loggers=output.loggers, run_dir=Path(run_dir), config=config, wandb=output.wandb,
                             mlflow=output.mlflow)
        return cls(trackers=made, artifacts_from=Path(artifacts_from if artifacts_from is not None else run_dir))

    def log(self, *, row: RoundMetrics, runtime: Mapping[str, float]) -> None:
        if not self.trackers:
            return
        scalars = scalars_of(row=row, runtime=runtime)
        for tracker in list(self.trackers):
            try:
                tracker.log(scalars=scalars, step=row.env_steps)
            except OSError as exc:
                if exc.errno in DISK_FULL_ERRNOS:   # the disk of metrics.jsonl and the checkpoints is full too
                    raise
                self._drop(tracker=tracker, step=row.env_steps, exc=exc)
            except Exception as exc:   # observability must not stop training: metrics.jsonl has every round
                self._drop(tracker=tracker, step=row.env_steps, exc=exc)

    def _drop(self, *, tracker: Tracker, step: int, exc: Exception) -> None:
        log.warning("output.loggers: %s failed at env step %d (%s: %s); it logs nothing more this run, "
                    "metrics.jsonl has every round", type(tracker).__name__, step, type(exc).__name__, exc)
        self.trackers.remove(tracker)
        _finish_quietly(tracker=tracker, artifacts=[], failed=True)

    def close(self, *, failed: bool) -> None:
        """Upload the artifacts that exist now and end every tracker run (later calls do nothing)."""
        if self.closed:
            return
        self.closed = True
        artifacts = [self.artifacts_from / name for name in self.ARTIFACTS if (self.artifacts_from / name).exists()]
        for tracker in self.trackers:
            _finish_quietly(tracker=tracker, artifacts=artifacts, failed=failed)

    def __enter__(self) -> RunTrackers:
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        self.close(failed=exc_type is not None)
