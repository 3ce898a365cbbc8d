"""Several workflows on one driver loop (run/members.py) stop like a single run: the summary names the stop rule
that held, and SIGINT/SIGTERM stop every member with a final checkpoint and exit 0 (no final evaluation)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from test_inline_workflows import inline_config  # the same directory (pytest puts it on sys.path)

from nimbus.run.loop import train

TWO = ["policies=[{name: a, algo: {lr: 1.0e-3}}, {name: b, algo: {lr: 3.0e-4}}]", "actors.fragment_steps=16",
       "actors.scaling={kind: fixed, num_actors: 1}", "algo.minibatch_size=32", "algo.num_epochs=1"]


def test_a_populations_summary_names_the_stop_rule_that_held(tmp_path: Path) -> None:
    result = train(config=inline_config(name="ppo-cartpole", run_root=tmp_path, overrides=["train.max_rounds=2", *TWO]))
    members = json.loads((result.run_dir / "population.json").read_text())["members"]
    assert {name: m["stopped_by"] for name, m in members.items()} == {"a": "max_rounds", "b": "max_rounds"}
    assert result.summary.stopped_by == "max_rounds"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_member_with_a_final_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            sig: signal.Signals) -> None:
    from nimbus.pbt.population import Population
    after_round = Population.after_round

    def signal_after_round_one(self, i, row) -> None:
        after_round(self, i, row)
        if row.round == 0 and i == 1:
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(Population, "after_round", signal_after_round_one)
    config = inline_config(name="ppo-cartpole", run_root=tmp_path, overrides=[
        "train.max_rounds=50", "train.eval_episodes=2", *TWO])
    # A handler of the caller's own, which the run must put back: whatever the test process inherited (a shell's
    # background job starts with SIGINT ignored) cannot tell a restored handler from one never touched.
    def callers_handler(signum, frame) -> None: ...
    outer = {s: signal.signal(s, callers_handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = train(config=config)
        restored = {s: signal.getsignal(s) for s in outer}
    finally:
        for s, handler in outer.items():
            signal.signal(s, handler)
    members = json.loads((result.run_dir / "population.json").read_text())["members"]
    assert {m["stopped_by"] for m in members.values()} == {sig.name}
    assert all(m["rounds"] < 50 and m["eval_return"] is None for m in members.values())
    for name in ("a", "b"):
        assert list((result.run_dir / "policies" / name / "checkpoints").glob("ckpt-*"))
    assert restored == {signal.SIGINT: callers_handler, signal.SIGTERM: callers_handler}   # the handlers are restored


def _runtime_parts(path: Path) -> list[dict]:
    return [json.loads(line)["runtime"] for line in path.read_text().splitlines()]


def test_every_runs_metrics_rows_carry_the_pools_runtime_scalars(tmp_path: Path) -> None:
    """MARLess runs and a population's members write the pool's counters (warm workers, cold starts...) into
    every metrics row, as a single policy's run does (they wrote ``runtime: {}``)."""
    single = train(config=inline_config(name="ppo-cartpole", run_root=tmp_path / "one",
                                        overrides=["train.max_rounds=1", *TWO[1:]]))
    keys = set(_runtime_parts(single.run_dir / "metrics.jsonl")[0])
    assert keys
    population = train(config=inline_config(name="ppo-cartpole", run_root=tmp_path / "two",
                                            overrides=["train.max_rounds=1", *TWO]))
    for name in ("a", "b"):
        assert [set(p) for p in _runtime_parts(population.run_dir / "policies" / name / "metrics.jsonl")] == [keys]
    pytest.importorskip("mpe2", reason="the MARLess case needs the [mpe] extra")
    marless = train(config=inline_config(name="marless-ippo-spread", run_root=tmp_path / "marless", overrides=[
        "train.max_rounds=1", "env.num_envs_per_actor=1", "actors.fragment_steps=8"]))
    assert [set(p) for p in _runtime_parts(marless.run_dir / "metrics.jsonl")] == [keys]
