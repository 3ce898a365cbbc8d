"""Runs of the shipped Stellaris config, inline (invocations in submission order, so a run repeats bit for bit):
the resident parameter function's state lost mid-run is rebuilt and the run is the same bits (issue 26 Build)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

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


def test_a_learner_launched_while_a_version_is_produced_reads_the_published_one_and_counts_it_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read policy (docs/stellaris.md): a learner launched while the parameter function produces v+1 does not
    wait; it reads v, the newest published version, and when its gradient is aggregated after v+1 is published its
    staleness counts that version (≥ 1)."""
    from nimbus.stellaris.workflow import StellarisWorkflow
    launched, members = {}, {}
    launch, on_parameter = StellarisWorkflow._launch, StellarisWorkflow._on_parameter

    def recording_launch(self, *, slot, batch, piece):
        busy, published = self.parameter_busy, self.progress.policy_version
        launch(self, slot=slot, batch=batch, piece=piece)
        launched[self.in_flight[slot].grad_key] = (busy, published, self.in_flight[slot].read_version)

    def recording_on_parameter(self, *, future, aggregation, batch, request):
        members.update({m.key: m.staleness for m in aggregation.members})
        on_parameter(self, future=future, aggregation=aggregation, batch=batch, request=request)

    monkeypatch.setattr(StellarisWorkflow, "_launch", recording_launch)
    monkeypatch.setattr(StellarisWorkflow, "_on_parameter", recording_on_parameter)
    train_inline(tmp_path, name="policy", resident=True)
    during = {key: read for key, (busy, published, read) in launched.items() if busy}
    assert during, "no learner was launched while the parameter function ran"
    assert all(read == launched[key][1] for key, read in during.items())   # the published version, no wait
    assert all(members[key] >= 1 for key in during if key in members)   # aggregated after v+1: counted stale
    assert sum(key in members for key in during) > 0


def test_a_resumed_resident_run_starts_from_the_checkpoints_full_state(tmp_path: Path) -> None:
    """A resident run's checkpoint (round 3: its optimizer state exported) resumed to round 6 twice, resident and
    not: the resumed resident parameter function anchors at the checkpoint's version with its optimizer state, so
    both resumed runs end with the same weights and optimizer state, bit for bit. Fails if the anchor of a resumed
    run is taken without its optimizer state (``has_optimizer_state`` false: a fresh Adam)."""
    def config(*, rounds: int, resident: bool, name: str):
        return load_config(path=CONFIG, overrides=[
            f"train.max_rounds={rounds}", f"output.root_dir={tmp_path / name}", "output.loggers=[]",
            "output.report=false", "output.status_line=false", "train.eval_episodes=0", "runtime.backend=inline",
            f"stellaris.resident_parameter={str(resident).lower()}"])
    first = train(config=config(rounds=3, resident=True, name="first"))
    ends = []
    for resident in (True, False):
        copy = tmp_path / f"copy-{resident}"
        __import__("shutil").copytree(first.run_dir, copy)
        resumed = train(config=config(rounds=6, resident=resident, name=f"resumed-{resident}"), resume_from=copy)
        final = sorted((resumed.run_dir / "checkpoints").glob("ckpt-*"))[-1]
        assert final.name != "ckpt-000003"
        ends.append(((final / "weights.safetensors").read_bytes(), saved_state(final / "optimizer.safetensors")))
    assert ends[0] == ends[1]


def saved_state(path: Path) -> tuple[dict[str, bytes], object]:
    """A saved optimizer state: its arrays' bytes and its metadata as data (the non-resident parameter function
    loads the checkpoint's state on its cold first call and keeps its per-parameter entries in the saved key order,
    "0", "1", "10", ...; a resident rebuild puts them in parameter order: the same state in another JSON order)."""
    with safe_open(str(path), "np") as saved:
        return ({key: saved.get_tensor(key).tobytes() for key in saved.keys()},
                json.loads(saved.metadata()["nimbus"]))
