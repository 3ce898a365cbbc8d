"""``nimbus sweep`` end to end (issue 29 item 2): a 3-trial, 2-seed sweep of PPO on CartPole (in-process runtime,
4 rounds a run) is killed while a trial runs, then the same command resumes it: the interrupted trial's values
run again, 3 trials finish, trials.csv, sweep.png and best.yaml are written and best.yaml is the best trial's
config."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
TRIALS = 3   # one finished before the kill, the one killed, its values again after it: 3 show all three


def _command(sweep_dir: Path, space: Path) -> list[str]:
    return [sys.executable, "-m", "nimbus.cli", "sweep", str(REPO / "configs" / "ppo-cartpole.yaml"),
            "--space", str(space), "--trials", str(TRIALS), "--seeds", "2", "--dir", str(sweep_dir),
            "--set", "runtime.backend=inline", "--set", "train.max_rounds=4", "--set", "train.eval_episodes=2",
            "--set", "algo.num_epochs=2"]


def _states(db: Path) -> list[tuple[int, str, int]]:
    """(number, state, values drawn) of every trial in Optuna's SQLite storage."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=5) as connection:
            return connection.execute(
                "SELECT t.number, t.state, COUNT(p.param_id) FROM trials t "
                "LEFT JOIN trial_params p ON p.trial_id = t.trial_id GROUP BY t.trial_id ORDER BY t.number").fetchall()
    except sqlite3.OperationalError:   # the schema is being created
        return []


def test_a_killed_sweep_resumes_and_finishes(tmp_path: Path) -> None:
    optuna = pytest.importorskip("optuna")
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"algo.lr": {"float": [1.0e-4, 3.0e-3], "log": True},
                                     "algo.minibatch_size": {"choice": [64, 128]}}))
    sweep_dir = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.Popen(_command(sweep_dir, space), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and first.poll() is None:   # kill inside a trial whose values are drawn
        states = _states(sweep_dir / "study.db")
        if any(state == "COMPLETE" for _, state, _ in states) and any(
                state == "RUNNING" and drawn == 2 for _, state, drawn in states):
            break
        time.sleep(0.1)
    assert first.poll() is None, f"the sweep ended before it could be killed: {first.stderr.read()[-2000:]}"
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    killed = [number for number, state, _ in _states(sweep_dir / "study.db") if state == "RUNNING"]
    assert len(killed) == 1

    second = subprocess.run(_command(sweep_dir, space), cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"trial {killed[0]} was interrupted" in second.stderr
    study = optuna.load_study(study_name="nimbus", storage=f"sqlite:///{sweep_dir / 'study.db'}")
    assert study.user_attrs["interrupted"] == killed
    trials = {t.number: t for t in study.trials}
    # the next trial (the resumed command's first) runs them (the resumed sampler is seeded past the trials drawn,
    # so a later one would not repeat them but by chance)
    assert trials[killed[0] + 1].params == trials[killed[0]].params, "the interrupted trial's values did not run next"
    finished = [t for t in study.trials if t.number not in killed and t.state.is_finished()]
    assert len(finished) == TRIALS and all(t.state.name in ("COMPLETE", "PRUNED") for t in finished)
    rows = (sweep_dir / "trials.csv").read_text().splitlines()
    assert rows[0].startswith("trial,state,value") and len(rows) == 1 + TRIALS
    best = max((t for t in finished if t.state.name == "COMPLETE"), key=lambda t: t.value)
    saved = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    assert saved["algo"]["lr"] == pytest.approx(best.params["algo.lr"])
    assert saved["algo"]["minibatch_size"] == [64, 128][best.params["algo.minibatch_size"]]
    assert f"best return: {best.value:,.4g}" in second.stdout
    assert plt.imread(sweep_dir / "sweep.png").shape == (405, 630, 4)      # 7 x 4.5 in at 90 dpi
    # each trial trained its 2 seeds as workloads of one pool: 2 run directories per finished trial
    assert all(len(t.user_attrs["run_dirs"]) == 2 for t in finished)


def test_ctrl_c_stops_the_sweep_and_its_trial_runs_again(tmp_path: Path) -> None:
    """A real SIGINT inside a trial: the sweep exits 0 saying so, that trial is failed (never scored) and queued with
    the same values; no later trial ran."""
    optuna = pytest.importorskip("optuna")
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"algo.lr": {"float": [1.0e-4, 3.0e-3], "log": True}}))
    sweep_dir = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.Popen(_command(sweep_dir, space), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and first.poll() is None:   # interrupt inside the first trial
        if any(state == "RUNNING" and drawn == 1 for _, state, drawn in _states(sweep_dir / "study.db")) and \
                any(path.stat().st_size > 0 for path in (sweep_dir / "trials").rglob("metrics.jsonl")):
            break   # a round was written: the trial is training
        time.sleep(0.1)
    assert first.poll() is None, f"the sweep ended before it could be interrupted: {first.stderr.read()[-2000:]}"
    first.send_signal(signal.SIGINT)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err[-3000:]
    assert "stopped by SIGINT" in out and "0 of 3 trials finished" in out, out
    study = optuna.load_study(study_name="nimbus", storage=f"sqlite:///{sweep_dir / 'study.db'}")
    assert [t.state.name for t in study.trials] == ["FAIL", "WAITING"]
    assert study.trials[1].system_attrs["fixed_params"] == study.trials[0].params
