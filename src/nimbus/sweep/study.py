"""``nimbus sweep CONFIG --space SPACE.yaml --trials N --seeds K``: hyperparameter search on Optuna, for return or
return per dollar.

Each trial samples the space (TPE, seeded with the config's seed), trains K seeds of that config at once as
workloads on one pool (run/workloads.py: fair share, one ledger), and scores the mean over seeds of each run's
final evaluation return (its training return when it does not evaluate), or of return / serverless cost
(``--objective return_per_usd``, from the ledger). A median pruner reads the seeds' mean moving return after
every round and stops a trial that falls below the median of earlier trials at that round. The study lives in
``SWEEP_DIR/study.db`` (SQLite): the same command resumes an interrupted sweep, re-running the trial it was in.
Each trial's runs are under ``SWEEP_DIR/trials/``; ``trials.csv`` and ``sweep.png`` list and plot every trial;
``best.yaml`` is the best trial's config.

Faults: one sweep per study at a time (``SWEEP_DIR/.lock``; a second exits 2 naming the holder's pid). SIGINT or
SIGTERM stops the sweep as a whole: the trial it was in is marked failed, never scored, and runs again on resume.
Values that each pass the space's check but are refused together (or by the env) fail that trial, which is not run
again. A resumed sweep's sampler is seeded past the trials already in the study, so it draws new values. A
study.db that is not a readable study, or one another program holds locked (when the sweep opens it, or records a
trial), is a clear error (exit 2); a trial whose result could not be recorded runs again on resume.

Example::

    result = run_sweep(config_path=Path("configs/ppo-cartpole.yaml"), space_path=Path("space.yaml"),
                       options=SweepOptions(trials=20, seeds=3, objective="return_per_usd"), sweep_dir=None)
    result.best_config_path
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nimbus.config import NimbusConfig, apply_overrides, dump_config, parse_config
from nimbus.config.yaml_loader import parse_yaml
from nimbus.errors import ConfigError
from nimbus.run.rundir import hold_lock
from nimbus.run.stop import SIGNALS
from nimbus.sweep.space import Space, load_space, with_values

if TYPE_CHECKING:
    from nimbus.run.summary import TrainResult
    from nimbus.types import RoundMetrics

log = logging.getLogger(__name__)
Objective = Literal["return", "return_per_usd"]
TrainSeeds = Callable[..., "list[TrainResult]"]   # (configs=..., after_round=...) -> one result per config


@dataclass(frozen=True)
class SweepOptions:
    trials: int
    seeds: int
    objective: Objective = "return"
    warmup_rounds: int = 2           # the pruner judges no trial before this many rounds
    startup_trials: int = 2          # ... nor before this many trials have finished
    lock_wait_s: float = 5.0         # how long a read or write of study.db waits for another program's lock


@dataclass(frozen=True)
class SweepResult:
    sweep_dir: Path
    best_value: float | None
    best_values: dict[str, Any]       # the best trial's space values
    best_config_path: Path | None
    finished: int                     # trials complete or pruned (or failed) in the study
    interrupted_by: str | None = None  # SIGINT / SIGTERM stopped the sweep during a trial (it runs again on resume)


class PruneOnRound:
    """After every round of a trial's seeds: once all K have finished round r, report their mean moving return at
    r to Optuna; stop the trial (every seed) when the pruner says so."""

    def __init__(self, *, trial: Any, seeds: int) -> None:
        self.trial, self.seeds = trial, seeds
        self.values: dict[int, dict[int, float]] = {}
        self.pruned = self.storage_failed = False

    def __call__(self, i: int, row: RoundMetrics) -> bool:
        value = row.extras.get("recent_return_mean", row.return_mean)
        if value is None:
            return False
        by_seed = self.values.setdefault(row.round, {})
        by_seed[i] = float(value)
        if len(by_seed) == self.seeds and not self.pruned and not self.storage_failed:
            try:
                self.trial.report(sum(by_seed.values()) / self.seeds, step=row.round)
                self.pruned = bool(self.trial.should_prune())
            except Exception as exc:   # noqa: BLE001 - study.db locked or gone: the trial trains on, unpruned
                self.storage_failed = True
                log.warning("sweep: the study could not take round %d's value (%s: %s); this trial is no longer "
                            "pruned", row.round, type(exc).__name__, exc)
        return self.pruned


def score_of(*, results: list[TrainResult], objective: Objective) -> float | None:
    """The mean over seeds of each run's evaluation return (else training return), or of return per dollar."""
    scores = []
    for result in results:
        value = result.summary.eval_return if result.summary.eval_return is not None else result.summary.final_return
        if value is None:
            return None
        if objective == "return_per_usd":
            cost = result.summary.serverless_cost_usd
            if not cost > 0:
                return None
            value = value / cost
        scores.append(value)
    return sum(scores) / len(scores)


def trial_configs(*, base: dict[str, Any], values: dict[str, Any], seeds: int, number: int,
                  trials_dir: Path) -> list[NimbusConfig]:
    """The K configs of one trial: the space's values, seeds base+0 … base+K−1, runs under the sweep directory."""
    first_seed = int(base.get("seed", 0))
    name = str(base.get("name", "run"))
    output = {**base.get("output", {}), "root_dir": str(trials_dir), "status_line": False, "report": False}
    return [parse_config(data=with_values(base={**base, "output": output}, values={
        **values, "seed": first_seed + k, "name": f"{name}-t{number}-s{k}"})) for k in range(seeds)]


def _default_train_seeds(**kwargs: Any) -> list[TrainResult]:
    from nimbus.run.workloads import train_workloads

    return train_workloads(**kwargs)


class Sweep:
    """One sweep directory's Optuna study and what it writes."""

    def __init__(self, *, base: dict[str, Any], space: Space, sweep_dir: Path, options: SweepOptions) -> None:
        try:
            import optuna
        except ImportError as exc:
            raise ConfigError(f"nimbus sweep needs the sweep extra (pip install 'nimbus-rl[sweep]'): {exc}") from None
        self.optuna, self.base, self.space, self.options = optuna, base, space, options
        self.sweep_dir = sweep_dir
        self.last_outcome = ""   # one line on how the last trial ended (the CLI prints it: a sweep runs for long)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        database = self.database = sweep_dir / "study.db"
        try:
            storage = optuna.storages.RDBStorage(url=f"sqlite:///{database.resolve()}",
                                                 engine_kwargs={"connect_args": {"timeout": options.lock_wait_s}})
            self.study = optuna.create_study(
                study_name="nimbus", storage=storage, load_if_exists=True, direction="maximize",
                pruner=optuna.pruners.MedianPruner(n_startup_trials=options.startup_trials,
                                                   n_warmup_steps=options.warmup_rounds))
            # seeded past the trials already in the study: a resumed sweep draws new values, not the first ones again
            drawn = len(self.study.get_trials(deepcopy=False))
            self.study.sampler = optuna.samplers.TPESampler(seed=int(base.get("seed", 0)) + drawn)
            self._requeue_interrupted()
        except Exception as exc:   # noqa: BLE001 - SQLAlchemy's and Optuna's errors: not a study, or locked
            raise ConfigError(f"{database}: cannot open the sweep's study ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200]}); a corrupt file: move it away to start the sweep "
                              f"afresh; a locked one: close the program that holds it") from None

    @contextmanager
    def storage_named(self) -> Iterator[None]:
        """study.db locked by another program (or gone) while the sweep reads it or records a trial: a clear error
        (exit 2) naming the file instead of SQLAlchemy's traceback. A trial whose result was not recorded is still
        RUNNING in the study, so the same command, run again, runs it again (``_requeue_interrupted``)."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            yield
        except (SQLAlchemyError, self.optuna.exceptions.StorageInternalError) as exc:
            cause = exc.__cause__ or exc   # Optuna's wrapper says "during the commit"; SQLAlchemy's says why
            first = (str(cause).strip().splitlines() or [""])[0][:200]
            raise ConfigError(f"{self.database}: the sweep's study could not be read or written "
                              f"({type(cause).__name__}: {first}); a trial not recorded runs again when the same "
                              f"command resumes the sweep; a locked file: close the program that holds it") from None

    def _requeue_interrupted(self) -> None:
        """A trial left RUNNING by a killed sweep failed; the same values run again as a new trial."""
        running = self.study.get_trials(deepcopy=False, states=(self.optuna.trial.TrialState.RUNNING,))
        for trial in running:
            self.study.tell(trial.number, state=self.optuna.trial.TrialState.FAIL)
            if len(trial.params) == len(self.space.dimensions):
                self.study.enqueue_trial(trial.params, skip_if_exists=False)
                log.warning("sweep: trial %d was interrupted; its values run again", trial.number)
            else:   # killed between ask() and drawing all its values: there are no values to run again
                log.warning("sweep: trial %d was interrupted before its values were drawn; a new trial takes "
                            "its place", trial.number)
        if running:
            self.study.set_user_attr("interrupted", [*self.interrupted(), *(t.number for t in running)])

    def interrupted(self) -> list[int]:
        """Trials a killed sweep left behind (failed, and run again under a new number)."""
        return list(self.study.user_attrs.get("interrupted", []))

    def finished(self) -> int:
        done = (self.optuna.trial.TrialState.COMPLETE, self.optuna.trial.TrialState.PRUNED,
                self.optuna.trial.TrialState.FAIL)
        interrupted = set(self.interrupted())
        return sum(1 for t in self.study.get_trials(deepcopy=False, states=done) if t.number not in interrupted)

    def run_trial(self, *, train_seeds: TrainSeeds) -> str | None:
        """Run one trial to its end; the signal's name when SIGINT or SIGTERM stopped it (None otherwise)."""
        trial = self.study.ask()
        values = self.space.sample(trial=trial)
        pruning = PruneOnRound(trial=trial, seeds=self.options.seeds)
        try:
            configs = trial_configs(base=self.base, values=values, seeds=self.options.seeds, number=trial.number,
                                    trials_dir=self.sweep_dir / "trials")
            results = train_seeds(configs=configs, after_round=pruning)
        except KeyboardInterrupt:   # Ctrl-C before the runs' own handler was in place (while they were being built)
            self._interrupted(trial=trial)
            self.last_outcome = f"trial {trial.number}: stopped by SIGINT, not counted"
            return "SIGINT"
        except ConfigError as exc:   # valid one by one, refused together (or by the env): never drawn again as is
            log.warning("sweep: trial %d's values are refused (%s); the trial failed", trial.number,
                        str(exc).replace("\n", "; "))
            self.last_outcome = f"trial {trial.number}: refused, failed ({_shown(values)})"
            trial.set_user_attr("refused", str(exc))
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            return None
        trial.set_user_attr("run_dirs", [str(r.run_dir) for r in results])
        signal = next((r.summary.stopped_by for r in results if r.summary.stopped_by in SIGNALS), None)
        if signal is not None:
            self._interrupted(trial=trial)
            self.last_outcome = f"trial {trial.number}: stopped by {signal}, not counted"
            return signal
        if pruning.pruned:
            self.study.tell(trial, state=self.optuna.trial.TrialState.PRUNED)
            self.last_outcome = f"trial {trial.number}: pruned ({_shown(values)})"
            return None
        value = score_of(results=results, objective=self.options.objective)
        if value is None:
            log.warning("sweep: trial %d has no score (no episode finished, or no cost)", trial.number)
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            self.last_outcome = f"trial {trial.number}: no score, failed ({_shown(values)})"
        else:
            self.study.tell(trial, value)
            self.last_outcome = f"trial {trial.number}: {self.options.objective} {value:,.4g} ({_shown(values)})"
        return None

    def _interrupted(self, *, trial: Any) -> None:
        """A signal stopped ``trial``: failed, not scored (its truncated return would steer the sampler and the
        pruner), and its values queued to run again when the sweep resumes."""
        self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
        self.study.enqueue_trial(trial.params, skip_if_exists=False)
        self.study.set_user_attr("interrupted", [*self.interrupted(), trial.number])

    def best(self) -> tuple[float | None, dict[str, Any]]:
        complete = self.study.get_trials(deepcopy=False, states=(self.optuna.trial.TrialState.COMPLETE,))
        if not complete:
            return None, {}
        best = max(complete, key=lambda t: t.value)
        return float(best.value), self.space.values_of(params=best.params)

    def write_outputs(self) -> Path | None:
        """trials.csv, sweep.png and (when a trial completed) best.yaml."""
        interrupted = set(self.interrupted())
        trials = [t for t in self.study.get_trials(deepcopy=False) if t.number not in interrupted]
        with open(self.sweep_dir / "trials.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["trial", "state", "value", "rounds_reported",
                             *[d.key for d in self.space.dimensions]])
            for t in trials:
                values = self.space.values_of(params=t.params) if len(t.params) == len(self.space.dimensions) else {}
                writer.writerow([t.number, t.state.name, "" if t.value is None else t.value,
                                 len(t.intermediate_values), *[values.get(d.key, "") for d in self.space.dimensions]])
        _plot(trials=trials, output=self.sweep_dir / "sweep.png", objective=self.options.objective)
        value, values = self.best()
        if value is None:
            return None
        path = self.sweep_dir / "best.yaml"
        path.write_text(dump_config(config=parse_config(data=with_values(base=self.base, values=values))))
        return path


def _shown(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
                     for key, value in values.items())


def _plot(*, trials: list[Any], output: Path, objective: Objective) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    done = [(t.number, t.value) for t in trials if t.value is not None]
    if done:
        ax.scatter(*zip(*done), color="tab:blue", label="complete", zorder=3)
        best, line = float("-inf"), []
        for number, value in done:
            best = max(best, value)
            line.append((number, best))
        ax.step(*zip(*line), where="post", color="tab:orange", label="best so far")
    pruned = [t.number for t in trials if t.state.name == "PRUNED"]
    for number in pruned:
        ax.axvline(number, color="0.8", lw=1)
    ax.set_xlabel("trial (grey: pruned)")
    ax.set_ylabel("return per USD" if objective == "return_per_usd" else "return (mean over seeds)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=90)
    plt.close(fig)


def run_sweep(*, config_path: Path, space_path: Path, options: SweepOptions, sweep_dir: Path | None,
              overrides: list[str] | None = None, train_seeds: TrainSeeds = _default_train_seeds,
              say: Callable[[str], None] = lambda line: None) -> SweepResult:
    """Run (or resume) the sweep until ``options.trials`` trials have finished; ``say`` hears when each trial starts
    and how it ended."""
    if options.trials < 1 or options.seeds < 1:
        raise ConfigError(f"--trials and --seeds must be at least 1, got {options.trials} and {options.seeds}")
    if not Path(config_path).exists():
        raise ConfigError(f"{config_path}: no such config file")
    base = apply_overrides(data=parse_yaml(text=Path(config_path).read_text(), source=str(config_path)) or {},
                           overrides=overrides or [])
    first = parse_config(data=base)                   # the base config itself is valid (exit 2 otherwise)
    space = load_space(path=space_path, base=base)
    sweep_dir = Path(sweep_dir) if sweep_dir is not None else Path(first.output.root_dir) / f"sweep-{first.name}"
    with hold_lock(directory=sweep_dir, what="sweep directory", hint="one sweep per study at a time: wait for it, "
                                                                     "or give another --dir"):
        sweep = Sweep(base=base, space=space, sweep_dir=sweep_dir, options=options)
        with sweep.storage_named():
            signal = None
            while signal is None and sweep.finished() < options.trials:
                say(f"trial {sweep.finished() + 1} of {options.trials}: training {options.seeds} seed(s)")
                signal = sweep.run_trial(train_seeds=train_seeds)
                say(sweep.last_outcome)
                sweep.write_outputs()
            best_path = sweep.write_outputs()
            value, values = sweep.best()
            finished = sweep.finished()
        return SweepResult(sweep_dir=sweep_dir, best_value=value, best_values=values, best_config_path=best_path,
                           finished=finished, interrupted_by=signal)
