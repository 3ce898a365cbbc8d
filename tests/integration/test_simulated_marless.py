"""``train.workflow: marless`` on ``runtime.backend: simulated`` (issue 30, MARLess at paper scale): the learning is
the inline run's exactly, the rounds take the simulated durations' critical path, per-policy actor scaling changes
the simulated actor cost as the ledger bills it, a seed repeats bitwise, and a real run's ledger fits a profile with
every MARLess function kind.

It was refused because the MARLess controller awaited its functions with ``concurrent.futures.wait``, which blocks on
a condition that only a real worker signals (a simulated future advances the clock only through its own
``result``/``exception``), and timed its rounds with ``time.perf_counter``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nimbus.cli import main
from nimbus.config.simulation import load_profile
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from support import ledger_rows

pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")

SMALL = ["actors.scaling={kind: fixed, num_actors: 2}", "env.num_envs_per_actor=2", "algo.num_epochs=1"]
SIM = "runtime.backend=simulated"
# constant durations in binary fractions: the critical path is exact
FIXED = ["simulation.default.distribution=constant",
         "simulation.functions.actor={median_s: 0.5, cold_start_s: 0.25}",
         "simulation.functions.critic={median_s: 0.375, cold_start_s: 0.0}",
         "simulation.functions.policy={median_s: 0.75, cold_start_s: 0.125}"]


@pytest.fixture
def one_torch_thread():
    """Torch at one thread in the driver, so the inline run sums as the simulated one does (docs/simulated.md: a
    simulated function runs at one thread); the learning compared is then bitwise."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def learned(rows: list) -> list[str]:
    """What a round learned: its steps, episodes, returns, versions and every loss, timings (``*_s``) left out."""
    return [json.dumps({"env_steps": r.env_steps, "episodes": r.episodes, "return": r.return_mean,
                        "version": r.policy_version,
                        "losses": {k: v for k, v in r.losses.items() if not k.endswith("_s")}}, sort_keys=True)
            for r in rows]


@pytest.mark.parametrize("algo", ["ippo", "mappo", "iql", "vdn", "qmix"])
def test_a_simulated_multiagent_run_learns_exactly_what_the_inline_run_learns(
        make_shipped_config, one_torch_thread, algo: str) -> None:
    runs = {}
    for backend in ("inline", "simulated"):
        config = make_shipped_config("marless-ippo-spread", overrides=[
            *SMALL, f"algo={{name: {algo}}}", "train.max_rounds=3", f"runtime.backend={backend}", f"name={backend}"])
        runs[backend] = train(config=config)
    assert learned(runs["simulated"].rows) == learned(runs["inline"].rows)
    assert len(runs["simulated"].rows) == 3 and runs["simulated"].rows[-1].return_mean is not None
    # the same functions ran, and the simulated round took simulated seconds (the default 1 s per call)
    kinds = [sorted(r["kind"] for r in ledger_rows(runs[b].run_dir) if r["outcome"] == "ok") for b in runs]
    assert kinds[0] == kinds[1]
    assert all(row.round_s == int(row.round_s) >= 2 for row in runs["simulated"].rows)


def test_round_time_is_the_critical_path_of_the_simulated_durations(make_shipped_config) -> None:
    config = make_shipped_config("marless-ippo-spread", overrides=[*SMALL, *FIXED, SIM, "train.max_rounds=3"])
    rows = read_metrics(path=train(config=config).run_dir / "metrics.jsonl")
    # round 0: cold actors (0.25 + 0.5), then every policy's critic (0.375), then its policy (cold: 0.125 + 0.75);
    # then warm: 0.5 + 0.375 + 0.75; the driver takes no simulated time
    assert [row["round_s"] for row in rows] == [2.0, 1.625, 1.625]
    assert [row["sampling_s"] for row in rows] == [0.75, 0.5, 0.5]
    assert [row["learning_s"] for row in rows] == [1.25, 1.125, 1.125]
    assert rows[-1]["wall_s"] == 2.0 + 1.625 + 1.625


def test_per_policy_actor_scaling_changes_the_simulated_actor_cost_as_the_ledger_bills_it(
        make_shipped_config) -> None:
    config = make_shipped_config("marless-ippo-spread", overrides=[
        *SMALL, *FIXED, SIM, "train.max_rounds=6", "marless.scaling=marless", "marless.i_max=4", "marless.i_min=1",
        "marless.beta=0.5"])
    result = train(config=config)
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    actors = [r for r in ledger_rows(result.run_dir) if r["kind"] == "actor" and r["outcome"] == "ok"]
    per_second = []
    for row in rows:
        start = row["wall_s"] - row["round_s"]
        mine = [r for r in actors if start <= r["start_at"] < row["wall_s"]]
        assert len(mine) == row["num_actors"]            # I actor functions ran in this simulated round
        assert sum(r["billed_s"] for r in mine) == 0.5 * len(mine) + 0.25 * sum(r["cold"] for r in mine)
        assert row["sampling_s"] == 0.5 + 0.25 * any(r["cold"] for r in mine)   # in parallel: I does not add time
        per_second.append(row["extras"]["marless/actor_cost_usd"] / sum(r["billed_s"] for r in mine))
    assert len({row["num_actors"] for row in rows}) > 1, [row["num_actors"] for row in rows]   # the rule scaled I
    assert all(math.isclose(p, per_second[0], rel_tol=1e-9) for p in per_second)   # dollars = billed s x price


def test_a_simulated_multiagent_run_repeats_bitwise_for_a_seed(make_shipped_config, tmp_path: Path) -> None:
    noisy = ["simulation.functions.actor={distribution: lognormal, median_s: 0.4, sigma: 0.5, failure_fraction: 0.2}",
             "simulation.functions.policy={distribution: lognormal, median_s: 0.6, sigma: 0.5}"]
    lines = []
    for run in ("a", "b"):
        config = make_shipped_config("marless-ippo-spread", overrides=[*SMALL, *noisy, SIM, "train.max_rounds=4"])
        result = train(config=config, run_dir=tmp_path / run)
        lines.append((result.run_dir / "metrics.jsonl").read_text())
        died = [r for r in ledger_rows(result.run_dir) if r["outcome"] == "worker_died"]
        assert died and [row.env_steps for row in result.rows] == [100, 200, 300, 400]   # retried rows count once
    assert lines[0] == lines[1] and len(lines[0].splitlines()) == 4


def test_a_profile_fitted_from_a_real_multiagent_run_names_every_marless_kind(make_shipped_config,
                                                                                 tmp_path: Path) -> None:
    """Real: the functions ran and their durations were measured. Inline (runtime/inline.py): the fit reads only the
    ledger, whose rows every backend writes alike, so a local run's worker processes (one per actor rank, critic,
    policy and post-processing function) are not its subject."""
    real = train(config=make_shipped_config("marless-ippo-spread", overrides=[
        *SMALL, "train.max_rounds=4", "algo={name: mappo}", "runtime.backend=inline"]), run_dir=tmp_path / "real")
    assert main(["simulate", "fit", str(real.run_dir)]) == 0
    profile_path = real.run_dir / "simulation-profile.yaml"
    profile = load_profile(path=profile_path)
    assert {"actor", "postprocess", "critic", "policy"} <= set(profile.functions)
    for kind in ("actor", "policy"):
        durations = [r["duration_s"] for r in ledger_rows(real.run_dir) if r["kind"] == kind and r["outcome"] == "ok"]
        assert min(durations) <= profile.functions[kind].median_s <= max(durations)
    simulated = train(config=make_shipped_config("marless-ippo-spread", overrides=[
        *SMALL, "train.max_rounds=4", "algo={name: mappo}", SIM, f"simulation.profile={profile_path}"]),
        run_dir=tmp_path / "simulated")
    assert [r.env_steps for r in simulated.rows] == [r.env_steps for r in real.rows]
