"""Parameter sharing as MARL users know it (issue 27 fix 4): ``marless.sharing: full`` (one policy, the agent's
one-hot in its input), shared groups conditioned on the agent id, and a free-form ``marless.policy_mapping``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nimbus.config import apply_overrides, load_config, parse_config
from nimbus.errors import ConfigError
from nimbus.marless.agent_id import append_agent_id, uses_agent_id
from nimbus.marless.config import MarlessConfig
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[3]
SMALL = ["runtime.backend=inline", "env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}"]


def config_of(tmp_path: Path, overrides: list[str], name: str = "marless-ippo-spread"):
    base = load_config(path=REPO / "configs" / f"{name}.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    epochs = ["algo.num_epochs=2"] if "num_epochs" in base["algo"] else []
    return parse_config(data=apply_overrides(data=base, overrides=[*SMALL, *epochs, *overrides]))


def maps(result) -> list[dict]:
    return [json.loads(line)["agent_policy"] for line in (result.run_dir / "marless.jsonl").read_text().splitlines()]


def test_agent_id_is_on_whenever_agents_may_share() -> None:
    assert not uses_agent_id(marless=MarlessConfig())
    assert all(uses_agent_id(marless=MarlessConfig(sharing=mode)) for mode in ("static", "full", "marless"))
    assert uses_agent_id(marless=MarlessConfig(policy_mapping={"agent_0": "team"}))
    assert not uses_agent_id(marless=MarlessConfig(sharing="full", agent_id=False))
    rows = append_agent_id(obs=np.ones((2, 3)), agent_index=np.array([0, 2]), num_agents=3)
    assert rows.tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 1]]


@pytest.mark.parametrize("algo", ["ippo", "mappo", "iql", "vdn"])
def test_full_sharing_trains_one_policy_that_reads_the_agent_id(tmp_path: Path, algo: str) -> None:
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    name = "marless-iql-spread" if algo == "iql" else "marless-vdn-spread" if algo == "vdn" else "marless-ippo-spread"
    result = train(config=config_of(tmp_path, ["train.max_rounds=2", "marless.sharing=full",
                                               *([f"algo={{name: {algo}}}"] if algo == "mappo" else [])], name=name))
    assert maps(result) == [dict.fromkeys(["agent_0", "agent_1", "agent_2"], "p_agent_0")] * 2
    assert [int(r.extras["marless/policies"]) for r in result.rows] == [1, 1]
    weights = next((result.run_dir / "policies" / "p_agent_0" / "checkpoints").glob("ckpt-*"))
    assert weights.is_dir()
    first = [k for k in result.rows[-1].losses if k.startswith("p_agent_0/")]
    assert first and not any(k.startswith("p_agent_1/") for k in result.rows[-1].losses)


def test_the_shared_policy_input_is_the_observation_and_the_one_hot(tmp_path: Path) -> None:
    """18 numbers of simple_spread N=3 + 3 for the agent: the first layer of the shared policy is 21 wide."""
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    from nimbus.data.checkpoint import Checkpointer

    result = train(config=config_of(tmp_path, ["train.max_rounds=1", "marless.sharing=full",
                                               "train.checkpoint_every_rounds=1"]))
    state = Checkpointer(directory=result.run_dir / "policies" / "p_agent_0" / "checkpoints").load_latest()
    widths = {tuple(v.shape) for k, v in state.weights.arrays.items() if k.endswith("0.weight")}
    assert (64, 21) in widths, widths


def test_a_free_form_policy_mapping(tmp_path: Path) -> None:
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    result = train(config=config_of(tmp_path, ["train.max_rounds=2",
                                               "marless.policy_mapping={agent_0: red, agent_1: red}"]))
    assert maps(result) == [{"agent_0": "red", "agent_1": "red", "agent_2": "p_agent_2"}] * 2
    assert {k.split("/")[0] for k in result.rows[-1].losses} == {"red", "p_agent_2"}


def test_bad_sharing_input_exits_2_naming_the_key(tmp_path: Path) -> None:
    pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
    adversary = ["env.id=mpe2:simple_adversary_v3", "env.kwargs={N: 2, max_cycles: 25}"]
    with pytest.raises(ConfigError, match=r"^marless\.sharing: full needs every agent to have the same spaces; this "
                                          r"env has 2 kinds \(agent_0, agent_1: Box.*\(10,\).*; adversary_0: Box.*"
                                          r"\(8,\).*Use sharing: static"):
        train(config=config_of(tmp_path, [*adversary, "marless.sharing=full"]))
    with pytest.raises(ConfigError, match=r"^marless\.policy_mapping\.agent_0: blue also holds adversary_0"):
        train(config=config_of(tmp_path, [*adversary, "marless.policy_mapping={adversary_0: blue, agent_0: blue}"]))
    with pytest.raises(ConfigError, match=r"marless: Value error, policy_mapping: sets the run's map itself"):
        config_of(tmp_path, ["marless.sharing=static", "marless.policy_mapping={agent_0: red}"])


@pytest.mark.parametrize("name", ["marless-vdn-spread", "marless-qmix-spread"])
def test_the_shipped_vdn_and_qmix_configs_share_one_network_as_pymarl_does(name: str) -> None:
    """pymarl's and EPyMARL's default for VDN and QMIX is one agent network with an agent id; with a network per agent
    the shipped QMIX config stayed at random level in one of two seeds (docs/marless.md, "Figures")."""
    marless = load_config(path=REPO / "configs" / f"{name}.yaml").marless
    assert marless.sharing == "full" and uses_agent_id(marless=marless)
