"""``--resume`` of a MARLess run (marless/checkpoint.py): every policy's networks, the agent→policy map and
the controllers come back exactly, the counters go on, a crash between two policies' saves resumes from the
round before, and a checkpoint of other agents or another network is refused. The runs train inline
(runtime/inline.py: the functions in the driver, in submission order): what a checkpoint saves and a resume puts
back is the subject, not the worker processes (reclaimed workers' slots: test_marless_restore_slots.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.numpy import load_file

from nimbus.errors import CheckpointError
from nimbus.marless import workflow as multiagent
from nimbus.marless.checkpoint import load_policies, policy_directory
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train

pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
POLICIES = ["p_agent_0", "p_agent_1", "p_agent_2"]
BASE = ["env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}", "runtime.backend=inline"]
SMALL = [*BASE, "algo.num_epochs=2"]
# Sharing toggles whenever its 2-round window fills (γ above any slope): after round 1 two groups share, so the
# map at round 3 is not the initial one; the scaling rule has convexity windows by then.
MOVING_CONTROLLERS = ["marless.sharing=marless", "marless.window=2", "marless.gamma=100", "marless.scaling=marless",
                      "marless.i_max=3", "marless.i_min=1", "marless.beta=0.5"]
VALUE = ["algo.learning_starts=100", "algo.gradient_steps=5"]


@pytest.fixture(autouse=True)
def one_torch_thread() -> None:
    """Torch at one thread in the driver: inline, the functions' sums depend on the driver's thread count (measured:
    at this machine's default the IPPO run resumed at round 2 differs from the uninterrupted one in the last bits
    of round 3's losses and networks; at one thread, as in a worker, they are equal). tests/conftest.py restores
    the count afterwards."""
    torch.set_num_threads(1)


def manifest(run_dir: Path, policy: str, round: int) -> dict:
    path = policy_directory(run_dir=run_dir, policy=policy) / f"ckpt-{round:06d}" / "manifest.json"
    return json.loads(path.read_text())


@pytest.mark.parametrize(("config_name", "overrides", "networks"), [
    ("marless-ippo-spread", ["algo={name: mappo}", *SMALL], {"critic.safetensors"}),
    ("marless-vdn-spread", [*BASE, *VALUE], {"target.safetensors"}),
    ("marless-qmix-spread", [*BASE, *VALUE], {"target.safetensors"}),   # + the mixer, in p_agent_0's
])
def test_a_resume_puts_back_every_network_and_the_run_state(make_shipped_config, tmp_path: Path, config_name: str,
                                                            overrides: list[str], networks: set[str]) -> None:
    """Resumed into a new directory and stopped before its first round, the run saves again what it put back:
    every policy's manifest (file hashes, versions, map, controller state, counters) equals the original's."""
    config = make_shipped_config(config_name, overrides=[*overrides, *MOVING_CONTROLLERS, "train.max_rounds=3"])
    first = train(config=config)
    original = {policy: manifest(first.run_dir, policy, 3) for policy in POLICIES}
    state = original["p_agent_0"]["extra"]["marless"]
    assert len(set(state["agent_policy"].values())) == 2 and state["sharing"]["enabled"]
    assert state["scaler"]["windows"]
    assert all(networks <= set(m["files"]) for m in original.values() if m["policy_version"] > 1)

    again = train(config=config, run_dir=tmp_path / "again", resume_from=first.run_dir)
    assert again.summary.rounds == 3
    assert {policy: manifest(again.run_dir, policy, 3) for policy in POLICIES} == original


def test_a_resumed_run_goes_on_from_its_round(make_shipped_config, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counters, costs, logs and the scaling rule's next actor count go on; the actors' env slots go on from the
    resumed round's sequence (fresh seeds, not round 0's again)."""
    config = make_shipped_config("marless-ippo-spread", overrides=[
        *SMALL, "train.max_rounds=2", "marless.scaling=marless", "marless.i_max=3", "marless.i_min=1",
        "marless.beta=0.5"])
    first = train(config=config)
    next_actors = manifest(first.run_dir, "p_agent_0", 2)["extra"]["marless"]["next_actors"]
    requests = []
    original = multiagent.MultiAgentActorRequest
    monkeypatch.setattr(multiagent, "MultiAgentActorRequest",
                        lambda **fields: requests.append(fields) or original(**fields))
    config = config.model_copy(update={"train": config.train.model_copy(update={"max_rounds": 4})})
    resumed = train(config=config, resume_from=first.run_dir)
    assert resumed.run_dir == first.run_dir and resumed.summary.rounds == 4
    rows = read_metrics(path=first.run_dir / "metrics.jsonl")
    assert [row["round"] for row in rows] == [0, 1, 2, 3]
    assert [row["policy_version"] for row in rows] == [3, 6, 9, 12]   # every policy once per round, on from 2
    assert rows[2]["num_actors"] == next_actors
    per_actor = 2 * config.actors.fragment_steps
    steps = [0] + [row["env_steps"] for row in rows]
    assert [after - before for before, after in zip(steps, steps[1:])] == \
        [row["num_actors"] * per_actor for row in rows]
    assert [r["slot_seq"] for r in requests if r["actor_rank"] == 0] == [2, 3]
    assert rows[2]["cost_usd"] > rows[1]["cost_usd"] and rows[2]["wall_s"] > rows[1]["wall_s"]
    assert len((first.run_dir / "marless.jsonl").read_text().splitlines()) == 4
    assert {manifest(first.run_dir, p, 4)["policy_version"] for p in POLICIES} == {4}


def test_a_crash_between_two_policies_saves_resumes_from_the_round_before(make_shipped_config) -> None:
    config = make_shipped_config("marless-ippo-spread", overrides=[*SMALL, "train.max_rounds=2",
                                                                   "train.checkpoint_every_rounds=1"])
    run_dir = train(config=config).run_dir
    assert {state.round for state in load_policies(path=run_dir, policies=POLICIES).values()} == {2}
    shutil.rmtree(run_dir / "policies" / "p_agent_2" / "checkpoints" / "ckpt-000002")   # saved the first two only
    states = load_policies(path=run_dir, policies=POLICIES)
    assert {state.round for state in states.values()} == {1}
    assert {state.policy_version for state in states.values()} == {1}
    (run_dir / "policies" / "p_agent_1" / "checkpoints" / "ckpt-000001" / "weights.safetensors").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="no round has a checkpoint of every policy"):
        load_policies(path=run_dir, policies=POLICIES)


@pytest.mark.parametrize(("override", "message"), [
    ("algo={name: mappo}", "algo.name='ippo'"),                            # another algorithm
    ("env.kwargs={N: 2, max_cycles: 25}", "the checkpoint's agents are"),  # other agents
    ("algo.hidden_sizes=[32]", "p_agent_0's weights in the checkpoint does not fit"),
])
def test_a_checkpoint_that_does_not_fit_is_refused(make_shipped_config, tmp_path: Path, override: str,
                                                   message: str) -> None:
    first = train(config=make_shipped_config("marless-ippo-spread", overrides=[*SMALL, "train.max_rounds=1"]))
    other = make_shipped_config("marless-ippo-spread", overrides=[*SMALL, "train.max_rounds=2", override])
    with pytest.raises(CheckpointError, match=message):
        train(config=other, run_dir=tmp_path / "other", resume_from=first.run_dir)


def test_a_directory_without_policies_is_refused(make_shipped_config, tmp_path: Path) -> None:
    config = make_shipped_config("marless-ippo-spread", overrides=[*SMALL, "train.max_rounds=1"])
    with pytest.raises(CheckpointError, match="no policies/ directory"):
        train(config=config, resume_from=tmp_path)


@pytest.mark.parametrize("algo", ["ippo", "mappo"])
def test_a_run_resumed_with_its_slots_is_the_run_never_stopped(make_shipped_config, tmp_path: Path,
                                                               algo: str) -> None:
    """With actors.restore_slots (the shipped configs) each rank's env slot is saved with the checkpoint, so 2
    rounds + resume + 2 rounds give the same networks, optimizers and slots, bit for bit, as 4 rounds. Fragments
    of 15 steps against episodes of 25: the checkpoint falls mid-episode."""
    overrides = [*SMALL, f"algo={{name: {algo}}}", "actors.fragment_steps=15", "actors.restore_slots=true",
                 "train.checkpoint_every_rounds=2", *MOVING_CONTROLLERS]
    whole = train(config=make_shipped_config("marless-ippo-spread", overrides=[*overrides, "train.max_rounds=4"]),
                  run_dir=tmp_path / "whole")
    first = train(config=make_shipped_config("marless-ippo-spread", overrides=[*overrides, "train.max_rounds=2"]),
                  run_dir=tmp_path / "first")
    assert "actors.safetensors" in manifest(first.run_dir, "p_agent_0", 2)["files"]
    resumed = train(config=make_shipped_config("marless-ippo-spread", overrides=[*overrides, "train.max_rounds=4"]),
                    run_dir=tmp_path / "resumed", resume_from=first.run_dir)
    for policy in POLICIES:
        assert manifest(resumed.run_dir, policy, 4)["files"] == manifest(whole.run_dir, policy, 4)["files"], policy
    returns = [(row["episodes"], row["return_mean"]) for row in read_metrics(path=whole.run_dir / "metrics.jsonl")]
    assert [(row["episodes"], row["return_mean"]) for row in read_metrics(path=resumed.run_dir / "metrics.jsonl")] \
        == returns[2:]


@pytest.mark.parametrize("config_name", ["marless-iql-spread", "marless-vdn-spread", "marless-qmix-spread"])
def test_a_value_run_resumed_with_its_replay_is_the_run_never_stopped(make_shipped_config, tmp_path: Path,
                                                                      config_name: str) -> None:
    """train.checkpoint_replay keeps IQL's per-policy and VDN's team replay (the last rounds' Store values) in
    the checkpoint, so with the slots too, 2 rounds + resume + 2 rounds equal 4 rounds bit for bit; without it
    the replay refills and the networks differ."""
    overrides = [*BASE, *VALUE, "actors.fragment_steps=15", "actors.restore_slots=true",
                 "train.checkpoint_every_rounds=2", "train.checkpoint_replay=true"]

    def run(name: str, rounds: int, *extra: str, resume_from: Path | None = None):
        config = make_shipped_config(config_name, overrides=[*overrides, f"train.max_rounds={rounds}", *extra])
        return train(config=config, run_dir=tmp_path / name, resume_from=resume_from)

    whole, first = run("whole", 4), run("first", 2)
    files = manifest(first.run_dir, "p_agent_0", 2)["files"]
    replay_files = [name for name in files if name.startswith("replay.")]
    plain = load_file(str(policy_directory(run_dir=first.run_dir, policy="p_agent_0") / "ckpt-000002" /
                          replay_files[0]))            # plain safetensors: readable without nimbus
    assert any(name.endswith("obs") and len(array) > 0 for name, array in plain.items()), sorted(plain)
    resumed = run("resumed", 4, resume_from=first.run_dir)
    for policy in POLICIES:
        assert manifest(resumed.run_dir, policy, 4)["files"] == manifest(whole.run_dir, policy, 4)["files"], policy
    refilled = run("refilled", 4, "train.checkpoint_replay=false", resume_from=first.run_dir)
    assert manifest(refilled.run_dir, "p_agent_0", 4)["files"]["weights.safetensors"] != \
        manifest(whole.run_dir, "p_agent_0", 4)["files"]["weights.safetensors"]


def test_a_resume_with_other_envs_per_actor_starts_fresh_episodes(make_shipped_config, tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Saved slots of 2 envs cannot go on in actors of 3: the resumed run warns and starts fresh episodes
    instead of failing every actor invocation."""
    overrides = [*SMALL, "actors.restore_slots=true"]
    first = train(config=make_shipped_config("marless-ippo-spread", overrides=[*overrides, "train.max_rounds=1"]))
    assert "actors.safetensors" in manifest(first.run_dir, "p_agent_0", 1)["files"]
    more = make_shipped_config("marless-ippo-spread", overrides=[*overrides, "train.max_rounds=2",
                                                                  "env.num_envs_per_actor=3"])
    resumed = train(config=more, run_dir=tmp_path / "more", resume_from=first.run_dir)
    assert resumed.summary.rounds == 2 and "every rank starts fresh episodes" in caplog.text
