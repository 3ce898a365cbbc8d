"""RELIABILITY.md promises on whole runs: faults are retried without double counting, user errors stop
the run with their traceback, interrupts checkpoint, and nothing is left behind. Checks made inside the functions'
own code (NaN and shape contracts, non-finite updates) run inline (runtime/inline.py: the worker's code path in
the driver); faults of workers and processes run on forked workers."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nimbus.data.shm import list_segments, run_prefix
from nimbus.errors import FunctionFailed, NimbusError
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.runtime.faults import FAULTS_ENV, read_counter
from support import ledger_rows, only_run_dir, wait_for

ROWS_PER_ACTOR = 4 * 32
INLINE = "runtime.backend=inline"


def test_flaky_actor_is_retried_and_counted_once(make_config, tmp_path: Path) -> None:
    """P1: attempts 1-2 of one invocation fail; env steps count the successful attempt only."""
    counter = tmp_path / "counter"
    config = make_config(overrides=["env.id=nimbus/FlakyCartPole-v0", "actors.scaling.num_actors=1",
                                    "algo.minibatch_size=128", "train.max_rounds=3",
                                    f"env.kwargs={{counter_path: {counter}, failures: 2, fail_at_step: 5}}"])
    result = train(config=config)
    assert counter.read_text() == "2"
    assert result.summary.env_steps == 3 * ROWS_PER_ACTOR
    actor_rows = [r for r in ledger_rows(result.run_dir) if r["function"] == "actor" and r["outcome"] != "prewarm"]
    first = [r for r in actor_rows if r["invocation_id"] == actor_rows[0]["invocation_id"]]
    assert [r["outcome"] for r in first] == ["error", "error", "ok"]
    assert [r["attempt"] for r in first] == [1, 2, 3]
    assert result.summary.retries == 2


def test_actor_worker_killed_mid_rollout_is_retried(make_config, tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    config = make_config(overrides=["env.id=nimbus/KillerCartPole-v0", "train.max_rounds=3",
                                    f"env.kwargs={{counter_path: {counter}, failures: 1, fail_at_step: 7}}"])
    result = train(config=config)
    assert result.summary.env_steps == 3 * 2 * ROWS_PER_ACTOR
    outcomes = [r["outcome"] for r in ledger_rows(result.run_dir) if r["function"] == "actor"]
    assert outcomes.count("worker_died") == 1


LEARNER_FAULT_RUN = ["train.max_rounds=3", "actors.scaling.num_actors=1", "algo.minibatch_size=128"]


_UNFAULTED_LOSSES: list = []  # the unfaulted run's losses per round, computed once for the module


def unfaulted_losses(make_config, run_dir: Path) -> list[dict[str, float]]:
    if not _UNFAULTED_LOSSES:
        rows = train(config=make_config(overrides=LEARNER_FAULT_RUN), run_dir=run_dir).rows
        _UNFAULTED_LOSSES.extend(row.losses for row in rows)
    return _UNFAULTED_LOSSES


@pytest.mark.parametrize(("action", "outcome"), [("kill", "worker_died"), ("raise", "error")])
def test_learner_failing_after_its_put_is_retried_and_the_run_completes(
        make_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action: str, outcome: str) -> None:
    """P1 for the learner: round 0's learner puts weights and optimizer state v+1, then dies (a fresh worker
    retries) or raises (its warm worker, whose cache already holds v+1, may retry). The retry re-puts v+1
    as the same invocation, and the run ends exactly as an unfaulted one."""
    expected = unfaulted_losses(make_config, run_dir=tmp_path / "unfaulted")
    counter = tmp_path / "counter"
    monkeypatch.setenv(FAULTS_ENV, json.dumps({"learner.published": {"action": action, "counter_path": str(counter),
                                                                     "times": 1}}))
    result = train(config=make_config(overrides=LEARNER_FAULT_RUN))
    assert read_counter(path=counter) == 1
    learner = [r for r in ledger_rows(result.run_dir) if r["function"] == "learner" and r["outcome"] != "prewarm"]
    assert [(r["attempt"], r["outcome"]) for r in learner[:2]] == [(1, outcome), (2, "ok")]
    assert learner[0]["invocation_id"] == learner[1]["invocation_id"]
    assert result.summary.policy_version == 3 and result.summary.retries == 1
    assert [row.losses for row in result.rows] == expected


def test_env_raising_every_step_stops_with_original_traceback(make_config) -> None:
    """P3: once retries are spent the run stops, naming the original exception."""
    config = make_config(overrides=["env.id=nimbus/RaisingCartPole-v0", "actors.function.max_retries=1"])
    started = time.monotonic()
    with pytest.raises(FunctionFailed) as info:
        train(config=config)
    assert time.monotonic() - started < 60
    assert info.value.error_type == "ValueError"
    assert "injected error on every step" in str(info.value)
    assert list_segments(prefix=run_prefix()) == []


@pytest.mark.parametrize("field", ["obs", "reward"])
def test_nan_from_env_is_named_and_never_reaches_the_loss(make_config, field: str) -> None:
    config = make_config(overrides=["env.id=nimbus/NaNCartPole-v0", "actors.scaling.num_actors=1",
                                    "algo.minibatch_size=128",
                                    f"env.kwargs={{nan_at_step: 3, field: {field}}}", INLINE])
    with pytest.raises(FunctionFailed) as info:
        train(config=config)
    message = str(info.value)
    assert info.value.error_type == "EnvContractError" and info.value.attempts == 1  # not retried
    assert "nimbus/NaNCartPole-v0" in message and "actor rank 0" in message and "step" in message
    run_dir = only_run_dir(Path(config.output.root_dir))
    assert not any(r["function"] == "learner" and r["outcome"] == "ok" for r in ledger_rows(run_dir)), \
        "a learner ran although the only actor's data contained NaN"


def test_nonfinite_updates_stop_the_run_at_max_nonfinite_losses_in_a_row(make_config) -> None:
    """A learning rate of 1e30 blows the weights up in round 0; every later update is non-finite (skipped,
    the version still advances), and the third in a row stops the run long before max_rounds."""
    config = make_config(overrides=["algo.lr=1e30", "train.max_nonfinite_losses=3", "train.max_rounds=10",
                                    "actors.scaling.num_actors=1", "algo.minibatch_size=64", INLINE])
    with pytest.raises(NimbusError, match="3 learner updates in a row produced a non-finite"):
        train(config=config)
    rows = read_metrics(path=only_run_dir(Path(config.output.root_dir)) / "metrics.jsonl")
    finite = [math.isfinite(row["losses"]["policy_loss"]) for row in rows]
    assert finite == [True, False, False]  # the third non-finite update stops the run before its round ends
    assert [row["policy_version"] for row in rows] == [1, 2, 3]


def test_wrong_observation_shape_names_expected_and_actual(make_config) -> None:
    config = make_config(overrides=["env.id=nimbus/WrongShapeCartPole-v0", "env.kwargs={bad_at_step: 2}", INLINE])
    with pytest.raises(FunctionFailed) as info:
        train(config=config)
    message = str(info.value)
    assert "(4,)" in message and "(5,)" in message and "nimbus/WrongShapeCartPole-v0" in message


def test_hung_env_is_killed_at_its_timeout_and_billed(make_config) -> None:
    """P6 on a whole run: a stuck step() is killed at the function's timeout; the ledger bills it."""
    config = make_config(overrides=["env.id=nimbus/SleepyCartPole-v0", "env.kwargs={sleep_at_step: 3}",
                                    "actors.function.timeout_s=2", "actors.function.max_retries=0"])
    started = time.monotonic()
    with pytest.raises(FunctionFailed, match="timeout|Timeout"):
        train(config=config)
    assert time.monotonic() - started < 30
    rows = [r for r in ledger_rows(only_run_dir(Path(config.output.root_dir))) if r["outcome"] == "timeout"]
    assert rows and all(r["billed_s"] >= 2.0 for r in rows)


def _nimbus(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nimbus.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kwargs)


def _child_pids(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_unknown_config_key_exits_2_naming_the_path(tmp_path: Path, run_cli) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("algo: {name: ppo, learning_rate: 0.1}\n")
    code, said = run_cli("train", str(config))
    assert code == 2
    assert "algo.learning_rate" in said and "unknown key" in said


@pytest.mark.parametrize(("yaml_text", "expected"), [
    ("train: {max_rounds: three}\n", ["train.max_rounds", "valid integer"]),
    ("env: {num_envs_per_actor: -4}\n", ["env.num_envs_per_actor", "greater than or equal to 1"]),
    ("actors: {scaling: {kind: fixed, num_actors: 100000000000000000000}}\n",
     ["actors.scaling.num_actors", "less than or equal to 1024"]),
    ("algo: {name: ppo\n", ["not valid YAML"]),
    ("algo: {name: ppo}\nenv: {id: CartPole-v1, num_envs_per_actor: 100000}\n"
     "actors: {scaling: {kind: fixed, num_actors: 1024}, fragment_steps: 100000}\n",
     ["shared memory", "actors.scaling", "env.num_envs_per_actor", "actors.fragment_steps"]),
], ids=["wrong-type", "negative-count", "count-beyond-any-quota", "yaml-error", "buffer-beyond-memory"])
def test_bad_config_exits_2_naming_the_key_before_anything_starts(tmp_path: Path, yaml_text: str,
                                                                   expected: list[str], run_cli, prefix: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(f"name: bad\noutput: {{root_dir: {tmp_path / 'runs'}, loggers: []}}\n" + yaml_text)
    code, text = run_cli("train", str(config))
    assert code == 2, text[-3000:]
    assert "Traceback" not in text and all(part in text for part in expected), text[-3000:]
    assert not list((tmp_path / "runs").glob("*/ledger.jsonl"))  # no runtime, so no worker, was started
    assert list_segments(prefix=prefix) == []


def _start_long_run(tmp_path: Path, prefix: str) -> tuple[subprocess.Popen, Path]:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "NIMBUS_SHM_PREFIX": prefix}
    proc = _nimbus("train", str(root / "configs" / "ppo-cartpole.yaml"), "--set", f"output.root_dir={tmp_path}",
                   "--set", "train.total_env_steps=10000000", "--set", "output.loggers=[]",
                   "--set", "output.report=false", env=env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        runs = [p for p in tmp_path.iterdir() if p.is_dir()]
        metrics = runs[0] / "metrics.jsonl" if runs else None
        if metrics is not None and metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            return proc, runs[0]
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"run did not start: {proc.communicate()[1][-2000:]}")


def test_an_interrupt_writes_a_final_checkpoint_and_exits_0(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT). SIGTERM is test_group_sigterm.py's: sent to the driver's whole process group, as a container
    stop sends it, with all of this asserted too (a driver started here for it would prove nothing more)."""
    prefix = f"nimbus_sigint{os.getpid()}_"
    proc, run_dir = _start_long_run(tmp_path, prefix)
    workers = _child_pids(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "SIGINT"
    checkpoints = sorted((run_dir / "checkpoints").glob("ckpt-*"))
    assert checkpoints and json.loads((checkpoints[-1] / "manifest.json").read_text())["round"] == summary["rounds"]
    assert list_segments(prefix=prefix) == []
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), timeout_s=0.5)   # as before: 0.5 s
    assert [pid for pid in workers if Path(f"/proc/{pid}").exists()] == []


def test_sigkill_of_the_driver_leaves_no_workers_and_no_segments(tmp_path: Path) -> None:
    """P15 on a whole run: workers exit and the run's shared memory is swept."""
    prefix = f"nimbus_sigkill{os.getpid()}_"
    proc, _ = _start_long_run(tmp_path, prefix)
    descendants = _child_pids(proc.pid)
    assert list_segments(prefix=prefix), "the run should own segments while it runs"
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        alive = [pid for pid in descendants if Path(f"/proc/{pid}").exists()
                 and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
        if not alive and not list_segments(prefix=prefix):
            break
        time.sleep(0.2)
    assert alive == [] and list_segments(prefix=prefix) == []
