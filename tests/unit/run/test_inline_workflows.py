"""Each workflow's logic end to end through ``train()`` on ``runtime.backend: inline`` (runtime/inline.py): no
worker is forked, so a run of a few rounds takes seconds. The forked and Ray backends keep their integration tests
(tests/integration); what these check is the workflow, not the backend: rows per round, policy lag and
heard-from versions, Stellaris's admitted and refused gradients, MARLess's learner split and sharing map, PBT's
exploit and lineage, and several workloads' costs on one pool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.config import NimbusConfig, apply_overrides, load_config, parse_config
from nimbus.data.codec import Message
from nimbus.data.shm import list_segments, run_prefix
from nimbus.run.loop import TrainResult, train
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.inline import InlineRuntime
from support import ledger_rows

REPO = Path(__file__).resolve().parents[3]


def inline_config(*, name: str, run_root: Path, overrides: list[str]) -> NimbusConfig:
    """A shipped config on the inline runtime, quiet, writing under ``run_root``."""
    base = load_config(path=REPO / "configs" / f"{name}.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(run_root), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    return parse_config(data=apply_overrides(data=base, overrides=["runtime.backend=inline", *overrides]))


def ok_counts(result: TrainResult, *, field: str = "function") -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in ledger_rows(result.run_dir):
        if row["outcome"] == "ok":
            counts[row[field]] = counts.get(row[field], 0) + 1
    return counts


# -------------------------------------------------------------------------------------------------------- onpolicy
def test_sync_rounds_collect_actors_x_envs_x_steps_and_a_seeded_run_repeats(tmp_path: Path) -> None:
    overrides = ["actors.scaling={kind: fixed, num_actors: 3}", "env.num_envs_per_actor=2", "actors.fragment_steps=16",
                 "algo.num_epochs=2", "algo.minibatch_size=32", "train.max_rounds=3"]
    first = train(config=inline_config(name="ppo-cartpole", run_root=tmp_path / "a", overrides=overrides))
    rows = first.rows
    assert [r.env_steps for r in rows] == [96, 192, 288]             # 3 actors × 2 envs × 16 steps a round
    assert [r.num_actors for r in rows] == [3, 3, 3] and [r.policy_version for r in rows] == [1, 2, 3]
    assert all(r.losses["num_gradient_steps"] == 2 * 96 // 32 for r in rows)   # the learner got every actor's rows
    assert ok_counts(first) == {"actor": 9, "learner": 3}
    assert not any(r["cold"] for r in ledger_rows(first.run_dir) if r["outcome"] == "ok")   # prewarmed: every call warm
    again = train(config=inline_config(name="ppo-cartpole", run_root=tmp_path / "b", overrides=overrides))
    assert [(r.losses, r.return_mean) for r in again.rows] == [(r.losses, r.return_mean) for r in rows]
    assert list_segments(prefix=run_prefix()) == []


def test_a_seeded_sync_run_inline_equals_the_same_run_on_forked_workers(tmp_path: Path) -> None:
    """Inline runs the functions' own code through the codec, with the driver's RNGs and threads kept apart: the
    numbers an onpolicy run produces are the local backend's, bit for bit (the one test here that forks workers)."""
    overrides = ["actors.scaling={kind: fixed, num_actors: 2}", "env.num_envs_per_actor=2", "actors.fragment_steps=16",
                 "algo.num_epochs=2", "algo.minibatch_size=32", "train.max_rounds=2"]
    runs = {backend: train(config=inline_config(name="ppo-cartpole", run_root=tmp_path / backend,
                                                overrides=[*overrides, f"runtime.backend={backend}"]))
            for backend in ("inline", "local")}
    inline, local = ([(r.env_steps, r.losses, r.return_mean) for r in runs[b].rows] for b in ("inline", "local"))
    assert len(inline) == 2 and inline == local


# ------------------------------------------------------------------------------------------------------- offpolicy
def test_async_rows_carry_the_policy_lag_of_the_rows_the_learner_read(tmp_path: Path) -> None:
    config = inline_config(name="dqn-cartpole", run_root=tmp_path, overrides=[
        "train.max_rounds=4", "algo.learning_starts=256", "algo.hidden_sizes=[32]"])
    result = train(config=config)
    rows = result.rows
    assert len(rows) == 4 and [r.policy_version for r in rows] == [1, 2, 3, 4]
    # the learner making version v reads rows sampled by versions 0..v-1: lag = v - 1 - row version
    assert all(0 <= r.extras["policy_lag_max"] <= r.policy_version - 1 for r in rows)
    lags = {int(lag): n for lag, n in json.loads((result.run_dir / "policy_lag.json").read_text())[
        "policy_lag_rows"].items()}
    rows_read = [int(r.extras["gradient_steps"]) * 64 for r in rows]
    assert sum(lags.values()) == sum(rows_read)
    # the run's histogram and the rounds' means and maxima describe the same rows
    assert sum(lag * n for lag, n in lags.items()) == pytest.approx(
        sum(r.extras["policy_lag_mean"] * n for r, n in zip(rows, rows_read)))
    assert max(lags) == max(r.extras["policy_lag_max"] for r in rows)
    assert ok_counts(result)["learner"] == 4


def test_heard_from_sends_a_new_version_only_to_the_actor_whose_fragment_was_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """IMPACT learns on one whole fragment a call, so each update is heard from one actor: that rank alone gets the
    new version; the others keep sampling with the version they were last given, older than the newest."""
    events: list[tuple[str, int, int]] = []   # ("actor", rank, version it was given) | ("published", -1, version)
    invoke = InlineRuntime.invoke

    def spy(self: InlineRuntime, *, spec: FunctionSpec, request: Message):
        future = invoke(self, spec=spec, request=request)
        if spec.kind == "actor":
            events.append(("actor", request.header["actor"]["actor_rank"], request.header["actor"]["policy_version"]))
        elif spec.kind == "learner":
            future.add_done_callback(lambda f: events.append(("published", -1, f.result().header["policy_version"])))
        return future

    monkeypatch.setattr(InlineRuntime, "invoke", spy)
    config = inline_config(name="impala-cartpole", run_root=tmp_path, overrides=[
        "train.max_rounds=8", "actors.scaling.num_actors=3", "algo.variant=impact"])
    assert config.offpolicy.sync_to == "heard_from"
    result = train(config=config)
    rows = result.rows
    assert len(rows) == 8 and all(r.extras["actors_heard_from"] == 1 for r in rows)
    assert all(r.extras["policy_lag_mean"] == r.extras["policy_lag_max"] for r in rows)
    newest, behind, given = 0, [], {}
    for kind, rank, version in events:
        if kind == "published":
            newest = version
            continue
        assert version <= newest and version >= given.get(rank, 0)   # a published version, never going back
        given[rank] = version
        behind.append(newest - version)
    # the driver may not yet have seen the newest version (one learner call in flight): 1 behind is no evidence;
    # sending every new version to every actor (sync_to: all on arrival) never leaves an actor 2 behind
    assert len(given) == 3 and max(behind) >= 2, events


# ------------------------------------------------------------------------------------------- Stellaris (learners)
def test_stellaris_settles_every_gradient_once_admitted_or_refused(tmp_path: Path) -> None:
    """2 actors × 2 envs × 64 steps = 256 rows, minibatches of 128, 4 epochs: 8 gradient tasks per batch, 3 learner
    functions in flight. Round 0 has no threshold (every gradient applied); decay 0.5 shrinks β_k fast enough that
    a later gradient is refused."""
    config = inline_config(name="stellaris-cartpole", run_root=tmp_path, overrides=[
        "train.max_rounds=3", "env.num_envs_per_actor=2", "stellaris.decay=0.5"])
    result = train(config=config)
    extras = [r.extras for r in result.rows]
    # the round sampled beside round 2 may settle while the run drains, so a fourth row may follow
    assert len(result.rows) >= 3 and {r.num_learners for r in result.rows} == {3}
    # round 0 launches all 8; once the rule refuses everything the version stands still, and a later round's
    # passes that would repeat a slice's gradient at that version are dropped, not invoked (stellaris/filling.py)
    assert extras[0]["staleness/learners_invoked"] == 8
    assert all(e["staleness/admitted"] + e["staleness/rejected"] == e["staleness/learners_invoked"] for e in extras)
    assert extras[0]["staleness/rejected"] == 0 and sum(e["staleness/rejected"] for e in extras) >= 1
    assert max(e["staleness/max"] for e in extras) > 0      # learners queued behind each other read older versions
    assert all(e["staleness/aggregations"] <= e["staleness/admitted"] for e in extras)
    assert {"gradient_learner", "parameter", "actor"} <= set(ok_counts(result))


# ------------------------------------------------------------------------------------------------ MARLess
MARLESS_SMALL = ["env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}", "algo.num_epochs=2"]


def marless_maps(result: TrainResult) -> list[dict]:
    return [json.loads(line) for line in (result.run_dir / "marless.jsonl").read_text().splitlines()]


def test_marless_learner_split_is_one_invocation_per_role_and_policy(tmp_path: Path) -> None:
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    config = inline_config(name="marless-ippo-spread", run_root=tmp_path,
                           overrides=[*MARLESS_SMALL, "train.max_rounds=2", "algo={name: mappo}", "algo.num_epochs=2"])
    result = train(config=config)
    assert ok_counts(result, field="kind") == {"actor": 2, "postprocess": 6, "critic": 6, "policy": 6}
    assert [r.policy_version for r in result.rows] == [3, 6]    # 3 policies, one version each per round


def test_marless_dynamic_sharing_changes_the_map_and_the_learner_invocations(tmp_path: Path) -> None:
    """γ above any slope: the detector toggles whenever its window (2 rounds) fills: off → on (2 groups) → off."""
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    config = inline_config(name="marless-ippo-spread", run_root=tmp_path, overrides=[
        *MARLESS_SMALL, "train.max_rounds=6", "marless.sharing=marless", "marless.window=2", "marless.gamma=100"])
    result = train(config=config)
    policies = [int(r.extras["marless/policies"]) for r in result.rows]
    assert policies == [3, 3, 2, 2, 3, 3]
    assert [int(r.extras["marless/learner_invocations"]) for r in result.rows] == [2 * p for p in policies]
    counts = ok_counts(result, field="kind")
    assert counts["critic"] + counts["policy"] == 2 * sum(policies)   # a critic and a policy function per policy
    maps = [m["agent_policy"] for m in marless_maps(result)]
    assert len(set(maps[2].values())) == 2 and len(set(maps[0].values())) == 3


# ------------------------------------------------------------------------------------------------ PBT
def test_pbt_exploit_copies_the_top_members_weights_and_records_lineage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nimbus.models.weights import weights_key
    from nimbus.pbt import population as population_module

    observed: list[tuple[str, str]] = []
    close = population_module.Population.close

    def close_after_reading_back(self) -> None:  # before the Store goes: hash both sides of every exploit
        for event in map(json.loads, (self.run_dir / "lineage.jsonl").read_text().splitlines()):
            if event["event"] == "exploit":
                mine = self.store.get(key=weights_key(policy=event["member"], version=event["version"]))
                theirs = self.store.get(key=weights_key(policy=event["source"], version=event["source_version"]))
                observed.append((population_module.weights_sha256(message=mine),
                                 population_module.weights_sha256(message=theirs)))
        close(self)

    monkeypatch.setattr(population_module.Population, "close", close_after_reading_back)
    config = inline_config(name="ppo-cartpole", run_root=tmp_path, overrides=[
        "train.max_rounds=3", "algo.minibatch_size=64", "algo.num_epochs=2", "env.num_envs_per_actor=2",
        "actors.fragment_steps=32", "actors.scaling={kind: fixed, num_actors: 1}", "store.keep_versions=50",
        "pbt={members: 4, interval_rounds: 1, fraction: 0.5, "
        "hyperparameters: {lr: {low: 1.0e-5, high: 1.0e-2, log: true}}}"])
    run_dir = train(config=config).run_dir
    exploits = [e for e in map(json.loads, (run_dir / "lineage.jsonl").read_text().splitlines())
                if e["event"] == "exploit"]
    assert exploits and len(observed) == len(exploits)
    for event, (mine, theirs) in zip(exploits, observed):
        assert mine == theirs == event["weights_sha256"] == event["source_weights_sha256"]
        assert event["member"] != event["source"]
    members = json.loads((run_dir / "population.json").read_text())["members"]
    assert set(members) == {f"member{i}" for i in range(4)} and all(m["rounds"] == 3 for m in members.values())


# ------------------------------------------------------------------------------------------- workloads (one pool)
def test_two_workloads_on_one_pool_bill_separately_and_their_costs_sum_to_the_pool(tmp_path: Path) -> None:
    from nimbus.cost.ledger import Ledger
    from nimbus.cost.pricing import load_pricing
    from nimbus.run.workloads import train_workloads

    small = ["train.max_rounds=2", "env.num_envs_per_actor=2", "actors.fragment_steps=16", "algo.num_epochs=2",
             "algo.minibatch_size=32"]
    configs = [inline_config(name="ppo-cartpole", run_root=tmp_path, overrides=[*small, f"name={name}"])
               for name in ("cartA", "cartB")]
    results = train_workloads(configs=configs)
    pool = Ledger.load(path=next(tmp_path.glob("pool-*")) / "ledger.jsonl")
    assert {r.function for r in pool} == {"cartA/actor", "cartA/learner", "cartB/actor", "cartB/learner"}
    pricing = load_pricing(path=None)
    for result, name in zip(results, ("cartA", "cartB")):
        own = Ledger.load(path=result.run_dir / "ledger.jsonl")
        assert {r.workload for r in own} == {name} and len(own) == sum(r.workload == name for r in pool)
        assert result.summary.serverless_cost_usd == pytest.approx(sum(pricing.cost_usd(record=r) for r in own))
    assert sum(r.summary.serverless_cost_usd for r in results) == pytest.approx(
        sum(pricing.cost_usd(record=r) for r in pool))
