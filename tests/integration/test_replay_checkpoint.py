"""``train.checkpoint_replay``: the replay buffer and Nitro's window are saved with each checkpoint as plain
safetensors and ``--resume`` restores them, so an off-policy run continues without refilling. The driver's logic:
the runs are inline (runtime/inline.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from nimbus.config import apply_overrides, load_config, parse_config
from nimbus.data.checkpoint import load_checkpoint
from nimbus.errors import CheckpointError
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[2]


def _dqn(tmp_path: Path, *overrides: str):
    base = load_config(path=REPO / "configs" / "dqn-cartpole.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    return parse_config(data=apply_overrides(data=base, overrides=[
        "algo.learning_starts=512", "algo.hidden_sizes=[32]", "algo.buffer_capacity=4096", "algo.train_freq=128",
        "algo.gradient_steps=8", "offpolicy.max_gradient_steps_per_call=8", "algo.prioritized=true",
        "offpolicy.max_steps_ahead=128",  # actors run <= 128 rows past the learner: well under 512 new rows
        "train.checkpoint_every_rounds=1000", "runtime.backend=inline", *overrides]))


def test_resumed_dqn_keeps_its_replay_buffer_and_priorities(tmp_path: Path) -> None:
    flag = "train.checkpoint_replay=true"
    first = train(config=_dqn(tmp_path, "train.max_rounds=2", flag), run_dir=tmp_path / "run")
    saved = load_checkpoint(path=first.run_dir)
    held = int(first.rows[-1].extras["buffer_rows"])
    files = sorted((first.run_dir / "checkpoints").glob("replay-*.safetensors"))
    assert [f.name for f in files] == [saved.extra["replay_file"]]
    plain = load_file(str(files[0]))          # plain safetensors, readable without nimbus
    assert plain["col.obs"].shape == (held, 4) and len(plain["meta.ingest_seq"]) == held
    assert np.all(np.diff(plain["meta.ingest_seq"]) == 1)
    assert plain["replay.priorities"].max() > 0 and plain["pacer"][0] == held
    resumed = train(config=_dqn(tmp_path, "train.max_rounds=3", flag), resume_from=first.run_dir)
    # the resumed run starts with every saved row and learns at once, with no wait for learning_starts
    assert resumed.rows[0].round == 2 and resumed.rows[0].extras["buffer_rows"] >= held
    assert resumed.rows[0].env_steps - saved.env_steps < 512           # < learning_starts of new rows
    # a replay file that does not match its checkpoint's manifest is refused
    replay = first.run_dir / "checkpoints" / load_checkpoint(path=first.run_dir).extra["replay_file"]
    replay.write_bytes(replay.read_bytes()[:-8])
    with pytest.raises(CheckpointError, match="SHA-256"):
        train(config=_dqn(tmp_path, "train.max_rounds=4", flag), resume_from=first.run_dir)


def test_nitro_window_survives_a_resume(make_config, tmp_path: Path) -> None:
    nitro = ("actors.scaling={kind: nitro, min_actors: 1, max_actors: 3, "
             "hessian: {subset_size: 128, max_iterations: 20}}")
    common = ["algo.minibatch_size=64", "train.checkpoint_replay=true", nitro, "runtime.backend=inline"]
    first = train(config=make_config(overrides=[*common, "train.max_rounds=2"]), run_dir=tmp_path / "run")
    assert first.rows[-1].extras["window_len"] == 2
    resumed = train(config=make_config(overrides=[*common, "train.max_rounds=3"]), resume_from=first.run_dir)
    assert resumed.rows[0].extras["window_len"] == 3              # 2 saved values + this round's
    assert resumed.rows[0].extras["window_max"] >= first.rows[-1].extras["window_max"]
