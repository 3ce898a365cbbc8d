"""Runs of the shipped Stellaris config, inline (invocations in submission order, so a run repeats bit for bit):
the resident parameter function's state lost mid-run is rebuilt and the run is the same bits (issue 26 Build)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config import load_config
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.stellaris import parameter as parameter_module, resident_log
from nimbus.stellaris.resident import RESIDENT

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "stellaris-cartpole.yaml"


def train_inline(tmp_path: Path, *, name: str, resident: bool) -> dict[str, object]:
    config = load_config(path=CONFIG, overrides=[
        "train.max_rounds=5", f"output.root_dir={tmp_path / name}", "output.loggers=[]", "output.report=false",
        "output.status_line=false", "train.eval_episodes=0", "runtime.backend=inline",
        f"stellaris.resident_parameter={str(resident).lower()}"])
    train(config=config)
    run_dir = next((tmp_path / name).iterdir())
    final = sorted((run_dir / "checkpoints").glob("ckpt-*"))[-1]
    rows = [(row["round"], row["policy_version"], row.get("return_mean"), row["extras"].get("staleness/mean"))
            for row in read_metrics(path=run_dir / "metrics.jsonl")]
    return {"weights": (final / "weights.safetensors").read_bytes(),
            "optimizer": (final / "optimizer.safetensors").read_bytes(), "rows": rows}


def test_a_lost_resident_state_is_rebuilt_and_the_run_is_the_same_bits(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The parameter function's worker loses its resident state before its 3rd, 8th and 15th calls (the inline
    equivalent of an evicted worker), and the full state is published every 4 aggregations (the anchor moves,
    old gradients are dropped): every call that lost it rebuilds, and the final checkpoint (weights and optimizer
    state) and every round's row equal the run that lost nothing, bit for bit; the weights also equal the
    non-resident run's. Fails without the replay (stellaris/resident.py rebuild) or with a replay that misses
    a recomputed member."""
    kept = train_inline(tmp_path, name="kept", resident=True)
    plain = train_inline(tmp_path, name="plain", resident=False)
    calls, rebuilt = [0], []
    original = parameter_module.parameter_function

    def losing(*, context, request):
        calls[0] += 1
        if calls[0] in (3, 8, 15):
            context.cache.pop(RESIDENT, None)
        result = original(context=context, request=request)
        rebuilt.append((calls[0], bool(result.header.get("rebuilt"))))
        return result

    monkeypatch.setattr(parameter_module, "parameter_function", losing)
    monkeypatch.setattr(resident_log, "FULL_STATE_EVERY", 4)
    lost = train_inline(tmp_path, name="lost", resident=True)
    assert {3, 8, 15} <= {call for call, again in rebuilt if again}, rebuilt
    assert lost["rows"] == kept["rows"]
    assert lost["weights"] == kept["weights"] == plain["weights"]
    assert lost["optimizer"] == kept["optimizer"] == plain["optimizer"]
