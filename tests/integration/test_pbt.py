"""Population-based training end to end on CartPole: after an exploit the bottom member's new version is
the top member's weights (by hash, read back from the Store) and the lineage file says so (on forked workers).
A member's failure and a population's resume are the driver's logic and run inline (runtime/inline.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_snapshots import weights_sha256

from nimbus.data.resume import load_resume_state
from nimbus.errors import CheckpointError
from nimbus.models.weights import weights_key
from nimbus.pbt import population as population_module
from nimbus.run.loop import train

PBT = ["train.max_rounds=3", "algo.lr_schedule=constant", "algo.clip_schedule=constant", "algo.minibatch_size=64",
       "algo.num_epochs=4", "actors.scaling={kind: fixed, num_actors: 1}", "store.keep_versions=50",
       "pbt={members: 4, interval_rounds: 1, fraction: 0.5, "
       "hyperparameters: {lr: {low: 1.0e-5, high: 1.0e-2, log: true}}}"]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_pbt_exploit_copies_the_top_members_weights_and_records_lineage(make_config, monkeypatch) -> None:
    observed: list[tuple[str, str]] = []
    original_close = population_module.Population.close

    def close_after_reading_back(self) -> None:  # before the Store goes: hash both sides of every exploit
        for event in _jsonl(self.run_dir / "lineage.jsonl"):
            if event["event"] == "exploit":
                store = self.store
                mine = store.get(key=weights_key(policy=event["member"], version=event["version"]))
                theirs = store.get(key=weights_key(policy=event["source"], version=event["source_version"]))
                observed.append((weights_sha256(arrays=mine.arrays), weights_sha256(arrays=theirs.arrays)))
        original_close(self)

    monkeypatch.setattr(population_module.Population, "close", close_after_reading_back)
    result = train(config=make_config(overrides=PBT))
    run_dir = result.run_dir
    exploits = [e for e in _jsonl(run_dir / "lineage.jsonl") if e["event"] == "exploit"]
    assert exploits and len(observed) == len(exploits)
    for event, (mine, theirs) in zip(exploits, observed):
        assert mine == theirs == event["weights_sha256"] == event["source_weights_sha256"]
        assert event["member"] != event["source"]
        ratio = event["values_after"]["lr"] / event["values_before"]["lr"]
        assert ratio == pytest.approx(0.8) or ratio == pytest.approx(1.2) or 1e-5 <= event["values_after"]["lr"] <= 1e-2
    hyper = _jsonl(run_dir / "hyperparameters.jsonl")
    assert {h["member"] for h in hyper} == {f"member{i}" for i in range(4)}
    assert len(hyper) == 12                                   # every member's values, every round
    members = json.loads((run_dir / "population.json").read_text())["members"]
    assert set(members) == {f"member{i}" for i in range(4)} and all(m["rounds"] == 3 for m in members.values())
    for name in members:
        assert len((run_dir / "policies" / name / "metrics.jsonl").read_text().splitlines()) == 3
    learners = [row for row in _jsonl(run_dir / "ledger.jsonl") if row["kind"] == "learner" and row["outcome"] == "ok"]
    assert len(learners) == 12 and not any(row["cold"] for row in learners)   # a warm learner for each member


def _failing(tmp_path: Path, policy: str) -> list[str]:
    """Members on FlakyCartPole: the first fault (step 20 of one env, inside every member's first fragment,
    so it fires whichever worker serves the fragment) fails one actor with no retries left."""
    counter = tmp_path / "faults"
    small = [o.replace("members: 4", "members: 2").replace("max_rounds=3", "max_rounds=2") for o in PBT]
    return [o for o in small if not o.startswith("store.")] + [
        "env.id=nimbus/FlakyCartPole-v0", f"env.kwargs={{fail_at_step: 20, failures: 1, counter_path: '{counter}'}}",
        "functions.actor={max_retries: 0}", f"pbt.on_member_failure={policy}", "runtime.backend=inline"]


def test_a_member_failing_past_its_retries_is_replaced_and_reported(make_config, tmp_path: Path) -> None:
    result = train(config=make_config(overrides=_failing(tmp_path, "replace")))
    failures = [e for e in _jsonl(result.run_dir / "lineage.jsonl") if e["event"] == "failure"]
    assert len(failures) == 1 and "injected failure" in failures[0]["error"]
    population = json.loads((result.run_dir / "population.json").read_text())
    assert population["failures"] == 1
    assert all(m["rounds"] == 2 for m in population["members"].values())   # the population went on


def test_on_member_failure_stop_ends_the_run_with_the_members_error(make_config, tmp_path: Path) -> None:
    from nimbus.errors import FunctionFailed

    with pytest.raises(FunctionFailed, match="injected failure"):
        train(config=make_config(overrides=_failing(tmp_path, "stop")))


@pytest.mark.parametrize("synchronous", [False, True])
def test_a_pbt_run_resumes_every_member_with_its_explored_values_and_counters(make_config, synchronous) -> None:
    """--resume of a population: every member continues from its own newest checkpoint (rounds, env steps,
    policy version) with the hyperparameters PBT had explored by then, not its first draw; the lineage
    counts go on. Synchronous too: no member waits for a generation the first run ranked."""
    two = [o.replace("members: 4", "members: 2") for o in PBT if not o.startswith("train.max_rounds")]
    two += ["runtime.backend=inline", f"pbt.synchronous={str(synchronous).lower()}"]
    first = train(config=make_config(overrides=two + ["train.max_rounds=4"]))
    run_dir, names = first.run_dir, ("member0", "member1")
    drawn = {h["member"]: h["hyperparameters"]["lr"] for h in _jsonl(run_dir / "hyperparameters.jsonl")
             if h["round"] == 0}
    saved = {name: load_resume_state(path=run_dir / "policies" / name) for name in names}
    explored = {name: state.config["algo"]["lr"] for name, state in saved.items()}
    assert explored != drawn   # an exploit changed a member's lr by the checkpoint, so the test can tell

    resumed = train(config=make_config(overrides=two + ["train.max_rounds=5"]), resume_from=run_dir)
    assert resumed.run_dir == run_dir
    after = {h["member"]: h for h in _jsonl(run_dir / "hyperparameters.jsonl") if h["round"] == 4}
    for name in names:
        # round 4's log comes before that round's own PBT decision, so it shows the value the member resumed with
        assert after[name]["hyperparameters"]["lr"] == explored[name]
        assert after[name]["env_steps"] > saved[name].env_steps
        rows = _jsonl(run_dir / "policies" / name / "metrics.jsonl")
        assert [row["round"] for row in rows] == [0, 1, 2, 3, 4]
        assert rows[4]["policy_version"] == saved[name].policy_version + 1
    population = json.loads((run_dir / "population.json").read_text())
    assert all(m["rounds"] == 5 for m in population["members"].values())
    exploits = [e for e in _jsonl(run_dir / "lineage.jsonl") if e["event"] == "exploit"]
    assert population["exploits"] == len(exploits)   # the first run's exploits are counted too


def test_resuming_a_run_of_one_policy_as_a_population_names_the_problem(make_config, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no policies/ directory"):
        train(config=make_config(overrides=PBT), resume_from=tmp_path)


def test_synchronous_pbt_ranks_each_generation_whole_however_the_rounds_interleave(make_config) -> None:
    """Members that learn at different speeds (num_epochs 1 to 100): without the wait a fast member ends rounds
    while a slow one is still in its first; with ``pbt.synchronous`` every member ends round r before any starts
    round r + 1, and each generation's bottom half (2 of 4) exploits a member of its top half."""
    speeds = [o.replace("hyperparameters: {lr: {low: 1.0e-5, high: 1.0e-2, log: true}}",
                        "synchronous: true, hyperparameters: {num_epochs: {low: 1, high: 100}}") for o in PBT]
    run_dir = train(config=make_config(overrides=speeds)).run_dir
    hyper = _jsonl(run_dir / "hyperparameters.jsonl")
    assert len({h["hyperparameters"]["num_epochs"] for h in hyper if h["round"] == 0}) == 4
    assert [h["round"] for h in hyper] == sorted(h["round"] for h in hyper)   # generation by generation
    exploits = [e for e in _jsonl(run_dir / "lineage.jsonl") if e["event"] == "exploit"]
    for generation in range(3):
        mine = [e for e in exploits if e["round"] == generation]
        assert len(mine) == 2 and not {e["member"] for e in mine} & {e["source"] for e in mine}
        assert all(e["weights_sha256"] == e["source_weights_sha256"] for e in mine)


def test_every_members_actor_keeps_its_envs_from_round_to_round(make_config, monkeypatch) -> None:
    """Acrobot's random-policy episodes last 500 steps, 8 fragments of 64: a member sees a return only if its
    actor's envs live on from round to round. On 2 cores the pool's default (2 x cores = 4 workers) held the 4
    members' learners and at most a few actors; the members' ranks moved between actor workers, restarted their
    envs each time, and 3 rounds in 128 saw an episode end. The pool is sized for every member's actor and
    learner (run/build.py pool_config), as several workloads' is."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    acrobot = [o for o in PBT if not o.startswith(("train.max_rounds", "algo.num_epochs"))] + [
        "env.id=Acrobot-v1", "env.num_envs_per_actor=4", "actors.fragment_steps=64", "train.max_rounds=9",
        "algo.num_epochs=1", "runtime.max_workers=null"]
    run_dir = train(config=make_config(overrides=acrobot)).run_dir
    for i in range(4):
        rows = _jsonl(run_dir / "policies" / f"member{i}" / "metrics.jsonl")
        assert len(rows) == 9 and any(row["return_mean"] is not None for row in rows), f"member{i}: no episode ended"
