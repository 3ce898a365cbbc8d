"""``nimbus train --resume``: a run stopped after N rounds continues from its checkpoint — weights,
optimizer state, counters, metrics and cost carry on, two resumes of one checkpoint are identical, and
a checkpoint that does not fit the config is refused with a clear error.

Resuming is the driver's and the checkpoint's logic, the same whichever runtime runs the functions, so most runs
here are inline (runtime/inline.py, no forked workers); an exact resume on CartPole and the SIGKILL across
processes run on forked workers."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nimbus.cli import main
from nimbus.config import dump_config
from nimbus.data.checkpoint import load_checkpoint
from nimbus.errors import CheckpointError
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.runtime.faults import FAULTS_ENV, read_counter

INLINE = "runtime.backend=inline"


@pytest.fixture
def inline_config(make_config):
    """``make_config`` on the inline runtime: ``inline_config(overrides=[...])``."""
    return lambda *, overrides: make_config(overrides=[*overrides, INLINE])


def _adam_steps(run_dir: Path) -> float:
    scalars = load_checkpoint(path=run_dir).optimizer.header["scalars"]
    return max(values["step"] for values in scalars.values())


def test_resume_continues_weights_optimizer_counters_and_metrics(inline_config, tmp_path: Path) -> None:
    first = train(config=inline_config(overrides=["train.max_rounds=3", "train.checkpoint_every_rounds=3"]),
                  run_dir=tmp_path / "run")
    saved = load_checkpoint(path=first.run_dir)
    assert (saved.round, saved.policy_version) == (3, 3)
    steps_after_3 = _adam_steps(first.run_dir)

    resumed = train(config=inline_config(overrides=["train.max_rounds=6", "train.checkpoint_every_rounds=3"]),
                    resume_from=first.run_dir)
    assert resumed.run_dir == first.run_dir  # a run directory is continued in place
    assert [row.round for row in resumed.rows] == [3, 4, 5]
    assert resumed.rows[0].env_steps == saved.env_steps + (resumed.rows[1].env_steps - resumed.rows[0].env_steps)
    assert resumed.summary.policy_version == 6 and resumed.summary.rounds == 6
    assert _adam_steps(resumed.run_dir) == pytest.approx(2 * steps_after_3)  # Adam's moments continued, not reset
    assert resumed.rows[0].wall_s > first.rows[-1].wall_s and resumed.rows[0].cost_usd > first.rows[-1].cost_usd
    rows = read_metrics(path=first.run_dir / "metrics.jsonl")
    assert [row["round"] for row in rows] == [0, 1, 2, 3, 4, 5]
    assert resumed.summary.episodes == resumed.rows[-1].episodes > saved.episodes


def test_two_resumes_of_one_checkpoint_are_identical(inline_config, tmp_path: Path) -> None:
    first = train(config=inline_config(overrides=["train.max_rounds=2", "train.checkpoint_every_rounds=2"]),
                  run_dir=tmp_path / "run")
    copies = [tmp_path / "a", tmp_path / "b"]
    for copy in copies:
        shutil.copytree(first.run_dir, copy)
    results = [train(config=inline_config(overrides=["train.max_rounds=4"]), resume_from=copy) for copy in copies]
    a, b = ([(r.round, r.env_steps, r.return_mean, r.losses.get("policy_loss")) for r in res.rows] for res in results)
    assert len(a) == 2 and a == b
    final = [load_checkpoint(path=copy) for copy in copies]
    for name, array in final[0].weights.arrays.items():
        np.testing.assert_array_equal(array, final[1].weights.arrays[name])


def test_resume_refuses_a_checkpoint_of_another_network(inline_config, tmp_path: Path) -> None:
    first = train(config=inline_config(overrides=["train.max_rounds=1", "train.checkpoint_every_rounds=1"]),
                  run_dir=tmp_path / "run")
    with pytest.raises(CheckpointError, match="do not fit the network") as wider:
        train(config=inline_config(overrides=["train.max_rounds=2", "algo.hidden_sizes=[32,32]"]),
              resume_from=first.run_dir)
    assert "actor.0.weight: checkpoint (64, 4), this config (32, 4)" in str(wider.value)
    assert "env.id" not in str(wider.value)  # the same env: only the network differs
    with pytest.raises(CheckpointError, match="do not fit the network") as other_env:
        train(config=inline_config(overrides=["train.max_rounds=2", "env.id=Acrobot-v1"]), resume_from=first.run_dir)
    message = str(other_env.value)
    assert "env.id: checkpoint 'CartPole-v1', this config 'Acrobot-v1'" in message
    assert "observation space: checkpoint Box(" in message and "(4,), float32), this config Box(" in message
    assert "action space: checkpoint Discrete(2), this config Discrete(3)" in message
    assert "actor.0.weight: checkpoint (64, 4), this config (64, 6)" in message
    with pytest.raises(CheckpointError, match="no such directory"):
        train(config=inline_config(overrides=["train.max_rounds=2"]), resume_from=tmp_path / "missing")


def test_cli_resume_reuses_the_run_config(inline_config, tmp_path: Path) -> None:
    first = train(config=inline_config(overrides=["train.max_rounds=2", "train.checkpoint_every_rounds=2"]),
                  run_dir=tmp_path / "run")
    assert main(["train", "--resume", str(first.run_dir), "--set", "train.max_rounds=3"]) == 0
    assert [row["round"] for row in read_metrics(path=first.run_dir / "metrics.jsonl")] == [0, 1, 2]
    assert main(["train"]) == 2  # neither a config nor --resume


def test_a_resumed_policy_plays_as_well_as_the_one_that_was_saved(inline_config, tmp_path: Path) -> None:
    trained = train(config=inline_config(overrides=["train.total_env_steps=40000", "train.target_return=150",
                                                  "train.return_window=20"]), run_dir=tmp_path / "run")
    assert trained.summary.final_return >= 150
    rounds = trained.summary.rounds
    resumed = train(config=inline_config(overrides=[f"train.max_rounds={rounds + 10}", "train.total_env_steps=100000"]),
                    resume_from=trained.run_dir)
    returns = [r.return_mean for r in resumed.rows if r.return_mean is not None]
    # episodes of the restored policy last ~150 steps: 10 rounds of 32 steps per env see them end. A policy
    # reset to its initial weights would score ~20.
    assert returns and np.mean(returns) >= 100, returns


def test_the_offpolicy_workflow_resumes_its_policy_version_and_counters(make_shipped_config, tmp_path: Path) -> None:
    def config(rounds: int):
        return make_shipped_config("dqn-cartpole", [f"train.max_rounds={rounds}", "train.checkpoint_every_rounds=3",
                                                    INLINE])

    first = train(config=config(3), run_dir=tmp_path / "run")
    saved = load_checkpoint(path=first.run_dir)
    resumed = train(config=config(5), resume_from=first.run_dir)
    assert [row.round for row in resumed.rows] == [3, 4]
    assert resumed.rows[0].policy_version > saved.policy_version and resumed.rows[0].env_steps > saved.env_steps
    assert resumed.summary.rounds == 5


def _row_key(row) -> tuple:
    return (row.round, row.env_steps, row.episodes, row.return_mean, row.policy_version, sorted(row.losses.items()))


@pytest.mark.parametrize("env", ["CartPole-v1", "Hopper-v5"])
def test_exact_resume_is_bitwise_2n_steps_equal_n_plus_save_load_plus_n(make_config, tmp_path: Path, env: str) -> None:
    """P9: with train.exact_resume, N rounds + checkpoint + a new process's --resume + N rounds give the very
    rounds and weights of 2N rounds straight through (CPU, onpolicy workflow)."""
    over = ["train.exact_resume=true", "train.checkpoint_every_rounds=3", f"env.id={env}"]
    if env == "Hopper-v5":   # MuJoCo's snapshot is the env's, not the worker's: inline (CartPole runs on workers)
        # 2 epochs of 8 minibatches a round, not 20: the updates resumed are as exact, at a tenth of the cost
        over += ["actors.fragment_steps=64", "algo.minibatch_size=64", "algo.num_epochs=2", INLINE]
    # the straight run inline: on workers it gives the same numbers bit for bit (test_inline_workflows.py)
    straight = train(config=make_config(overrides=over + ["train.max_rounds=6", INLINE]), run_dir=tmp_path / "straight")
    half = train(config=make_config(overrides=over + ["train.max_rounds=3"]), run_dir=tmp_path / "half")
    assert load_checkpoint(path=half.run_dir).actors is not None
    resumed = train(config=make_config(overrides=over + ["train.max_rounds=6"]), resume_from=half.run_dir)
    assert [_row_key(r) for r in resumed.rows] == [_row_key(r) for r in straight.rows[3:]]
    a, b = load_checkpoint(path=straight.run_dir), load_checkpoint(path=resumed.run_dir)
    for name, array in a.weights.arrays.items():
        np.testing.assert_array_equal(array, b.weights.arrays[name], err_msg=name)
    for name, array in a.optimizer.arrays.items():
        np.testing.assert_array_equal(array, b.optimizer.arrays[name], err_msg=name)
    if env == "CartPole-v1":  # the saved env slots only fit the same envs
        with pytest.raises(CheckpointError, match="an exact resume needs the same envs"):
            train(config=make_config(overrides=over + ["train.max_rounds=7", "env.num_envs_per_actor=8"]),
                  resume_from=resumed.run_dir)


def _cli(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nimbus.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _tensorboard_steps(event_file: Path) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(event_file))
    events.Reload()
    return [event.step for event in events.Scalars("charts/episodic_return")]


def test_sigkill_inside_optimizer_step_then_a_fresh_process_resumes_exactly(make_config, tmp_path: Path) -> None:
    """P8 + P9 across processes: the driver is SIGKILLed while round 3's learner is inside optimizer.step();
    a new process resumes from the newest verified checkpoint (round 2; round 2's own update is lost with the
    process), and its rounds, weights and TensorBoard steps continue exactly as an uninterrupted run's."""
    over = ["train.exact_resume=true", "train.checkpoint_every_rounds=2", "output.loggers=[tensorboard]"]
    # the uninterrupted run inline: the same numbers as on workers, bit for bit (test_inline_workflows.py)
    straight = train(config=make_config(overrides=over + ["train.max_rounds=5", INLINE]), run_dir=tmp_path / "straight")
    run_dir, counter = tmp_path / "killed", tmp_path / "steps"
    config = make_config(overrides=over + ["train.max_rounds=5"])
    (tmp_path / "config.yaml").write_text(dump_config(config=config))
    steps_per_round = config.algo.num_epochs  # one minibatch per epoch: 256 rows, minibatch_size 256
    fault = {"learner.optimizer_step": {"action": "sleep", "counter_path": str(counter),
                                        "after": 3 * steps_per_round + 3, "times": 1}}
    proc = _cli("train", str(tmp_path / "config.yaml"), "--run-dir", str(run_dir),
                env={**os.environ, FAULTS_ENV: json.dumps(fault)})
    deadline = time.monotonic() + 180
    while read_counter(path=counter) <= 3 * steps_per_round + 3 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    proc.kill()  # the learner sleeps inside optimizer.step() of round 3
    proc.communicate(timeout=60)
    assert load_checkpoint(path=run_dir).round == 2  # the newest verified checkpoint
    resumed = _cli("train", "--resume", str(run_dir), env={k: v for k, v in os.environ.items() if k != FAULTS_ENV})
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    keys = ("round", "env_steps", "episodes", "return_mean", "policy_version", "losses")
    after = [{k: row[k] for k in keys} for row in read_metrics(path=run_dir / "metrics.jsonl")][-3:]
    assert after == [{k: row[k] for k in keys} for row in read_metrics(path=straight.run_dir / "metrics.jsonl")][2:]
    a, b = load_checkpoint(path=straight.run_dir), load_checkpoint(path=run_dir)
    for name, array in a.weights.arrays.items():
        np.testing.assert_array_equal(array, b.weights.arrays[name], err_msg=name)
    newest = sorted(run_dir.glob("events.out.tfevents.*"), key=lambda f: f.stat().st_mtime)[-1]
    assert _tensorboard_steps(newest) == [row.env_steps for row in straight.rows[2:]]  # steps continue


class _Planted:
    """Unpickling this runs ``touch <path>``: the side effect a refused pickle must not have."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_planted_pickle_checkpoint_is_refused_without_side_effect(inline_config, tmp_path: Path) -> None:
    """P11: a newest checkpoint whose weights were replaced by a pickle (manifest hash fixed up too) is never
    unpickled: loading falls back to the previous checkpoint, and a lone planted one is refused."""
    first = train(config=inline_config(overrides=["train.max_rounds=2", "train.checkpoint_every_rounds=1"]),
                  run_dir=tmp_path / "run")
    newest = sorted((first.run_dir / "checkpoints").glob("ckpt-*"))[-1]
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Planted(marker))
    (newest / "weights.safetensors").write_bytes(payload)
    (newest / "model.pt").write_bytes(payload)  # a torch-style pickle beside it is never opened either
    manifest = json.loads((newest / "manifest.json").read_text())
    manifest["files"]["weights.safetensors"] = hashlib.sha256(payload).hexdigest()
    (newest / "manifest.json").write_text(json.dumps(manifest))
    assert load_checkpoint(path=first.run_dir).round == 1  # the previous one, which verifies
    with pytest.raises(CheckpointError, match="not a nimbus checkpoint file, refused"):
        load_checkpoint(path=newest)
    resumed = train(config=inline_config(overrides=["train.max_rounds=3"]), resume_from=first.run_dir)
    assert resumed.summary.rounds == 3 and not marker.exists()


def test_raising_total_env_steps_on_resume_keeps_the_original_schedules(
        inline_config, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """#28.10: the learning rate and clip coefficient of a resumed round are those the original run's linear
    schedules give at that step, not re-scaled to the raised ``train.total_env_steps``; the resume says what
    changed (a warning listing the changed keys)."""
    linear = ["algo.lr_schedule=linear", "algo.clip_schedule=linear", "train.total_env_steps=2048",
              "train.checkpoint_every_rounds=2", "train.target_return=null"]
    uninterrupted = train(config=inline_config(overrides=[*linear, "train.max_rounds=6"]), run_dir=tmp_path / "whole")
    first = train(config=inline_config(overrides=[*linear, "train.max_rounds=4"]), run_dir=tmp_path / "run")
    with caplog.at_level("WARNING"):
        resumed = train(config=inline_config(overrides=[*linear, "train.max_rounds=6", "train.total_env_steps=4096"]),
                        resume_from=first.run_dir)
    assert [row.round for row in resumed.rows] == [4, 5]
    expected = [(row.losses["lr"], row.losses["clip_coef"]) for row in uninterrupted.rows[4:6]]
    assert [(row.losses["lr"], row.losses["clip_coef"]) for row in resumed.rows] == expected
    assert expected[1][0] < expected[0][0] < inline_config(overrides=linear).algo.lr   # the schedule anneals
    assert "train.total_env_steps: 2048 → 4096" in caplog.text
    assert "schedules stay anchored to the run's original 2048 env steps" in caplog.text
    assert load_checkpoint(path=resumed.run_dir).extra["schedule_env_steps"] == 2048   # kept for the next resume
