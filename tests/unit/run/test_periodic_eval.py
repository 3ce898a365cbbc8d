"""Periodic evaluation (train.eval_every_env_steps): when it runs, what it evaluates, what it stops."""

import json
from pathlib import Path

import numpy as np
import pytest
from test_inline_workflows import inline_config  # the same directory (pytest puts it on sys.path)

from nimbus.algos.registry import make_algorithm
from nimbus.config import NimbusConfig, apply_overrides, load_config, parse_config
from nimbus.data.codec import Message
from nimbus.data.resume import load_resume_state
from nimbus.envs.make import make_env
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError
from nimbus.models.weights import model_to_message, weights_key
from nimbus.pbt.population import weights_sha256
from nimbus.roles.evaluate import evaluate_policy
from nimbus.run.loop import train
from nimbus.run.periodic_eval import PeriodicEvaluator
from nimbus.run.stop import stop_reason
from nimbus.types import Progress

REPO = Path(__file__).resolve().parents[3]


def newest(config, store, progress):
    """What the workflow's ``evaluate`` does: the newest version of ``main`` from the Store."""
    return lambda *, episodes, seed, explore: evaluate_policy(
        config=config, weights=store.get(key=weights_key(policy="main", version=progress.policy_version)),
        episodes=episodes, seed=seed, explore=explore)


def dqn_config(*overrides: str) -> NimbusConfig:
    data = load_config(path=REPO / "configs" / "dqn-cartpole.yaml").model_dump(mode="json")
    return parse_config(data=apply_overrides(data=data, overrides=["train.eval_every_env_steps=1000",
                                                                   "train.eval_episodes=3", *overrides]))


class DictStore:
    """Only what the evaluator reads: get(key) of a published version; any other key is a KeyError."""

    def __init__(self, items: dict[str, Message]) -> None:
        self.items, self.reads = items, []

    def get(self, *, key: str) -> Message:
        self.reads.append(key)
        return self.items[key]


def published(config: NimbusConfig, version: int) -> DictStore:
    env = make_env(env_id=config.env.id, seed=0)
    model = make_algorithm(config=config.algo).make_model(
        spaces=EnvSpaces(observation=env.observation_space, action=env.action_space))
    return DictStore({weights_key(policy="main", version=version): model_to_message(model=model, version=version)})


def test_evaluates_only_when_the_env_steps_cross_the_next_multiple() -> None:
    config = dqn_config()
    store = published(config, version=7)
    evaluator = PeriodicEvaluator(config=config, env_steps=0)
    progress = Progress(env_steps=999, policy_version=7)
    assert evaluator.maybe_evaluate(evaluate=newest(config, store, progress), progress=progress) == {}
    assert store.reads == [] and progress.eval_return is None
    progress.env_steps = 2_300          # one round crossed two marks: one evaluation, the next at 3000
    scalars = evaluator.maybe_evaluate(evaluate=newest(config, store, progress), progress=progress)
    assert store.reads == [weights_key(policy="main", version=7)] and scalars["eval/policy_version"] == 7.0
    assert progress.eval_return == scalars["eval/return_mean"] and evaluator.next_at == 3_000
    progress.env_steps = 2_999
    assert evaluator.maybe_evaluate(evaluate=newest(config, store, progress), progress=progress) == {}


def test_a_resumed_run_evaluates_at_the_next_multiple() -> None:
    assert PeriodicEvaluator(config=dqn_config(), env_steps=12_345).next_at == 13_000


@pytest.mark.parametrize("explore", [True, False])
def test_plays_the_configured_episodes_greedily_or_as_in_training(explore: bool) -> None:
    config = dqn_config(f"train.eval_explore={str(explore).lower()}")
    store = published(config, version=0)
    progress = Progress(env_steps=1_000)
    scalars = PeriodicEvaluator(config=config, env_steps=0).maybe_evaluate(
        evaluate=newest(config, store, progress), progress=progress)
    weights = store.items[weights_key(policy="main", version=0)]
    expected = evaluate_policy(config=config, weights=weights, episodes=3, seed=config.seed + 20_000, explore=explore)
    other = evaluate_policy(config=config, weights=weights, episodes=3, seed=config.seed + 20_000,
                            explore=not explore)
    # a fresh DQN's epsilon is 1: sampled actions are uniform, greedy ones one fixed action (CartPole ends in ~10)
    assert expected.mean_return != other.mean_return
    assert scalars["eval/return_mean"] == expected.mean_return
    assert scalars["eval/return_std"] == expected.std_return


def test_the_run_stops_on_the_target_eval_return() -> None:
    config = dqn_config("train.target_eval_return=475")
    progress = Progress(env_steps=10_000)
    assert stop_reason(config=config, progress=progress) is None
    progress.eval_return = 474.9
    assert stop_reason(config=config, progress=progress) is None
    progress.eval_return = 475.0
    assert stop_reason(config=config, progress=progress) == "target_eval_return"


@pytest.mark.parametrize(("overrides", "message"), [
    (["train.eval_every_env_steps=null", "train.target_eval_return=475"],
     "train.target_eval_return needs train.eval_every_env_steps"),
    (["train.eval_episodes=0"], "train.eval_every_env_steps needs train.eval_episodes"),
])
def test_config_errors_name_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        dqn_config(*overrides)


# ------------------------------------------------------------------------------------------------ a population
EVERY = 160   # a member's round: 1 actor × 4 envs × 16 steps = 64 env steps; marks 160, 320, 480 at rounds 2, 4, 7
POPULATION = ["pbt={members: 2, interval_rounds: 2, fraction: 0.5, hyperparameters: {lr: {low: 1.0e-4, high: "
              "1.0e-2, log: true}}}", "actors.fragment_steps=16", "algo.minibatch_size=32", "algo.num_epochs=1",
              "store.keep_versions=50", f"train.eval_every_env_steps={EVERY}", "train.eval_episodes=2"]


def member_rows(run_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "policies" / name / "metrics.jsonl").read_text().splitlines()]


def due_rounds(rows: list[dict]) -> list[int]:
    """The rounds whose env steps crossed a multiple of EVERY (the member's own steps)."""
    before = [0] + [row["env_steps"] for row in rows[:-1]]
    return [row["round"] for row, steps in zip(rows, before) if row["env_steps"] // EVERY > steps // EVERY]


def evaluated_rounds(rows: list[dict]) -> list[int]:
    return [row["round"] for row in rows if "eval/return_mean" in row["extras"]]


def test_each_population_member_is_evaluated_every_n_of_its_own_env_steps(tmp_path: Path) -> None:
    """PBT members go through the loop's RoundHook: each member's metrics.jsonl has its evaluations at its own
    env-step marks, of its own newest version on its own seed, and hyperparameters.jsonl repeats them."""
    config = inline_config(name="pbt-cartpole", run_root=tmp_path, overrides=["train.max_rounds=5", *POPULATION])
    run_dir = train(config=config).run_dir
    hyper = [json.loads(line) for line in (run_dir / "hyperparameters.jsonl").read_text().splitlines()]
    for i, name in enumerate(("member0", "member1")):
        rows = member_rows(run_dir, name)
        assert [row["env_steps"] for row in rows] == [64, 128, 192, 256, 320]
        assert evaluated_rounds(rows) == due_rounds(rows) == [2, 4]
        for row in rows:
            if "eval/return_mean" in row["extras"]:
                assert row["extras"]["eval/policy_version"] == row["policy_version"]
        logged = {h["round"]: (h["eval_return_mean"], h["eval_policy_version"]) for h in hyper
                  if h["member"] == name and "eval_return_mean" in h}
        assert logged == {row["round"]: (row["extras"]["eval/return_mean"], row["policy_version"])
                          for row in rows if "eval/return_mean" in row["extras"]}
        # round 4 is the last: the final checkpoint holds the version it evaluated, on the member's seed (seed + i)
        state = load_resume_state(path=run_dir / "policies" / name)
        assert state.policy_version == rows[4]["policy_version"]
        replayed = evaluate_policy(config=parse_config(data=state.config), weights=state.weights, episodes=2,
                                   seed=config.seed + i + 20_000, explore=True)
        assert rows[4]["extras"]["eval/return_mean"] == replayed.mean_return


def test_evaluating_a_population_inline_leaves_its_training_as_it_was(tmp_path: Path) -> None:
    """On the inline runtime the members' functions run on a thread of the driver's process, which shares torch's
    global RNG with the driver's evaluation: the evaluation holds the runtime's ``exclusive()`` so that no call
    runs meanwhile, and every member's weights are those of the same run without periodic evaluation."""
    finals = []
    for overrides in (POPULATION, [o for o in POPULATION if not o.startswith("train.eval")]):
        run_dir = train(config=inline_config(name="pbt-cartpole", run_root=tmp_path / str(len(finals)),
                                             overrides=["train.max_rounds=5", *overrides])).run_dir
        finals.append([weights_sha256(message=load_resume_state(path=run_dir / "policies" / name).weights)
                       for name in ("member0", "member1")])
    assert finals[0] == finals[1]


def test_a_resumed_population_evaluates_each_member_at_its_next_mark(tmp_path: Path) -> None:
    """--resume of a population: a member resumed at 192 env steps evaluates next at 320 (round 4), not at its
    first resumed round (256: the mark 160 counted from 0 again)."""
    first = train(config=inline_config(name="pbt-cartpole", run_root=tmp_path,
                                       overrides=["train.max_rounds=3", *POPULATION]))
    resumed = train(config=inline_config(name="pbt-cartpole", run_root=tmp_path,
                                         overrides=["train.max_rounds=6", *POPULATION]), resume_from=first.run_dir)
    assert resumed.run_dir == first.run_dir
    for name in ("member0", "member1"):
        rows = member_rows(first.run_dir, name)
        assert [row["round"] for row in rows] == [0, 1, 2, 3, 4, 5]
        assert evaluated_rounds(rows) == due_rounds(rows) == [2, 4]


def test_a_multiagent_run_evaluates_periodically_with_each_policys_version(tmp_path: Path) -> None:
    """The one run loop's periodic evaluation also runs MARLess's workflow: every agent plays its policy, and
    the row names the version each policy was evaluated at."""
    data = load_config(path=REPO / "configs" / "marless-ippo-spread.yaml").model_dump(mode="json")
    data["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    config = parse_config(data=apply_overrides(data=data, overrides=[
        "train.max_rounds=4", "train.eval_every_env_steps=800", "train.eval_episodes=2", "runtime.backend=inline"]))
    rows = train(config=config).rows
    before = [0] + [row.env_steps for row in rows[:-1]]
    due = [row.round for row, steps in zip(rows, before) if row.env_steps // 800 > steps // 800]
    evaluated = [row.round for row in rows if "eval/return_mean" in row.extras]
    assert due and evaluated == due
    for row in rows:
        if row.round in evaluated:
            assert {k for k in row.extras if k.startswith("eval/policy_version/")} == {
                f"eval/policy_version/p_agent_{i}" for i in range(3)}
            assert np.isfinite(row.extras["eval/return_mean"]) and row.extras["eval/return_mean"] < 0
