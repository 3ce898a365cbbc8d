"""ARTOS's pre-warm monitor (prewarm.mode: monitor) on ``runtime.backend: simulated``: its trigger is a timer on the
virtual clock, so a simulated PPO run pre-warms its actor workers once the workload is stable, the round loses its
actors' cold start, and two runs are bitwise equal (docs/simulated.md, "Pre-warming"). The real-backend counterpart is
tests/integration/test_artos_pool.py::test_monitor_prewarms_actor_workers_once_the_workload_is_stable."""

from __future__ import annotations

from pathlib import Path

from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from support import ledger_rows

ROUNDS = 14
# Constant durations: actors 1 s after a 0.5 s cold start, the learner 3 s. The keep-alive (1.6 s) outlasts the
# actors' phase, so the learner stays warm, but not the learner's update, so idle actor workers are reclaimed every
# round: without pre-warming every round after the first takes 0.5 + 1 + 3 = 4.5 s.
SIM = ["runtime.backend=simulated", "runtime.prewarm=false", "runtime.max_workers=null", "runtime.keep_alive_s=1.6",
       f"train.max_rounds={ROUNDS}", "train.total_env_steps=1000000", "train.target_return=1000",
       "simulation.functions.actor.median_s=1.0", "simulation.functions.actor.cold_start_s=0.5",
       "simulation.functions.learner.median_s=3.0", "simulation.functions.learner.cold_start_s=0.5"]


def _run(make_config, *, mode: str, run_dir: Path) -> tuple[str, list[dict], list[dict]]:
    result = train(config=make_config(overrides=[*SIM, f"prewarm.mode={mode}"]), run_dir=run_dir)
    text = (result.run_dir / "metrics.jsonl").read_text()
    return text, read_metrics(path=result.run_dir / "metrics.jsonl"), ledger_rows(result.run_dir)


def test_the_monitor_prewarms_actors_on_the_virtual_clock_and_the_round_loses_their_cold_start(
        make_config, tmp_path: Path) -> None:
    _, off, _ = _run(make_config, mode="none", run_dir=tmp_path / "off")
    first, on, ledger = _run(make_config, mode="monitor", run_dir=tmp_path / "on")
    again, _, _ = _run(make_config, mode="monitor", run_dir=tmp_path / "again")
    assert first == again                                          # deterministic: bitwise the same rows
    assert [row["round_s"] for row in off[1:]] == [4.5] * (ROUNDS - 1)
    assert [row["round_s"] for row in on[-4:]] == [4.0] * 4         # the 0.5 s cold start is hidden
    prewarms = [r for r in ledger if r["outcome"] == "prewarm" and r["function"] == "actor" and r["cold"]]
    first_learner_end = min(r["end_at"] for r in ledger if r["kind"] == "learner" and r["outcome"] == "ok")
    assert prewarms and min(r["queued_at"] for r in prewarms) > first_learner_end   # during the run, not at start
    late = on[-4]["wall_s"] - on[-4]["round_s"]                     # the start of the fourth-last round
    attempts = [r for r in ledger if r["function"] == "actor" and r["outcome"] == "ok"]
    assert not [r for r in attempts if r["start_at"] >= late and r["cold"]]   # every actor found a warm worker
    assert [r for r in attempts if r["cold"]]                       # before the monitor was stable, they did not
    assert on[-1]["extras"]["prewarm/fired"] >= 4 and on[-1]["extras"]["prewarm/warmed"] >= 8
