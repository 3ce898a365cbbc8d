"""The parameter function's recompute from its worker's caches (stellaris/recompute.py) equals the recompute from the
Store, bit for bit: the same run with the caches emptied before every parameter call ends in the same weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config import load_config
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.stellaris import parameter, recompute

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "stellaris-cartpole.yaml"


def final_weights(tmp_path: Path, name: str) -> tuple[bytes, float]:
    config = load_config(path=CONFIG, overrides=[
        "train.max_rounds=4", f"output.root_dir={tmp_path / name}", "output.loggers=[]", "output.report=false",
        "output.status_line=false", "train.eval_episodes=0", "runtime.backend=inline"])
    result = train(config=config)
    final = sorted((result.run_dir / "checkpoints").glob("ckpt-*"))[-1]
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    recomputed = sum(row["extras"]["staleness/recomputed"] for row in rows)
    return (final / "weights.safetensors").read_bytes(), recomputed


def test_a_recompute_from_the_caches_equals_one_from_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails if a cached model, slice or peer log-probability differed from the Store's (e.g. a model kept before
    its optimizer step, or a peer's log-probabilities cached for another task)."""
    cached, recomputed = final_weights(tmp_path, "cached")
    assert recomputed > 0   # the run aggregated mixed versions
    built: list[int] = []
    original = recompute.recompute_cache

    def empty(*, state, run_key):
        state.pop(recompute.RECOMPUTE, None)   # every call starts from the Store
        built.append(1)
        return original(state=state, run_key=run_key)

    monkeypatch.setattr(recompute, "recompute_cache", empty)
    monkeypatch.setattr(parameter, "recompute_cache", empty)
    uncached, _ = final_weights(tmp_path, "uncached")
    assert built and cached == uncached
