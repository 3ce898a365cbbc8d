"""Seeded determinism snapshots: a refactor proves it changed nothing (CONVENTIONS 11, issue 11 item 5).

Each case is a short seeded run on the local backend whose per-round returns, env steps, actor counts and
losses, and a SHA-256 of the final weights, are compared bitwise with the snapshot checked in beside
this file (``snapshots/<case>.json``). After an intended change of numerics, re-record with
``NIMBUS_RECORD_SNAPSHOTS=1 pytest tests/integration/test_snapshots.py`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nimbus.config import NimbusConfig, apply_overrides, load_config, parse_config
from nimbus.train.checkpoint import load_checkpoint
from nimbus.train.trainer import train

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
NITRO = ("actors.scaling={kind: nitro, min_actors: 1, max_actors: 3, "
         "hessian: {subset_size: 128, max_iterations: 20}}")

CASES: dict[str, tuple[str, list[str]]] = {   # case → (shipped config, overrides)
    "sync_ppo_cartpole": ("ppo-cartpole", ["train.max_rounds=5"]),
    # async, made deterministic: one actor (no arrival order), lockstep, weights sent on publication
    "async_sac_pendulum": ("sac-pendulum", ["train.max_rounds=4", "algo.hidden_sizes=[32, 32]",
                                            "algo.learning_starts=32", "actors.scaling={kind: fixed, num_actors: 1}",
                                            "async_workflow.lockstep=true", "async_workflow.sync_to=heard_from"]),
    "nitro_ppo_cartpole": ("ppo-cartpole", ["train.max_rounds=5", "algo.minibatch_size=64", NITRO]),
    "pipelined_ppo_cartpole": ("ppo-cartpole", ["train.max_rounds=5", "pipeline.dual_stage=true",
                                                "pipeline.loader=true"]),
}


def _config(*, name: str, overrides: list[str], tmp_path: Path) -> NimbusConfig:
    base = load_config(path=REPO / "configs" / f"{name}.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "tensorboard": False, "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    return parse_config(data=apply_overrides(data=base, overrides=overrides))


def weights_sha256(*, arrays: dict[str, np.ndarray]) -> str:
    """A hash of every array (name, dtype, shape, bytes), in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{array.dtype.str}|{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _trace(*, config: NimbusConfig) -> dict[str, Any]:
    result = train(config=config)
    rows = [{"round": row.round, "env_steps": row.env_steps, "num_actors": row.num_actors,
             "policy_version": row.policy_version, "return_mean": row.return_mean,
             "losses": {key: row.losses[key] for key in sorted(row.losses)}} for row in result.rows]
    weights = load_checkpoint(path=result.run_dir).weights.arrays
    return {"rows": rows, "weights_sha256": weights_sha256(arrays=weights)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_matches_its_snapshot_bitwise(case: str, tmp_path: Path) -> None:
    name, overrides = CASES[case]
    trace = json.loads(json.dumps(_trace(config=_config(name=name, overrides=overrides, tmp_path=tmp_path))))
    path = SNAPSHOTS / f"{case}.json"
    if os.environ.get("NIMBUS_RECORD_SNAPSHOTS") == "1":
        path.write_text(json.dumps(trace, indent=1) + "\n")
    expected = json.loads(path.read_text())
    assert trace["rows"] == expected["rows"]          # floats round-trip through JSON exactly (repr)
    assert trace["weights_sha256"] == expected["weights_sha256"]
