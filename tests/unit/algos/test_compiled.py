"""learner.compile (algos/compiled.py): the config accepts it for onpolicy PPO only, the learner builds PPO with it, and
a compiled update equals the eager one within float32 round-off (``slow``: the first call compiles, tens of seconds)."""

from __future__ import annotations

import pytest
import torch

from nimbus.algos import compiled as compiled_module
from nimbus.algos.compiled import compiled
from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.registry import make_algorithm
from nimbus.config import load_config
from nimbus.errors import ConfigError
from tests.algo_batches import make_case, run_update

CARTPOLE = "configs/ppo-cartpole.yaml"


@pytest.mark.parametrize(("overrides", "named"), [
    (["algo={name: dqn}", "train.workflow=offpolicy"], "algo.name is 'dqn'"),
    (["pipeline.minibatch=true"], "a pipeline is on"),
    (["learner.compile=fastest"], "learner.compile"),
])
def test_the_config_refuses_compile_outside_sync_ppo(overrides: list[str], named: str) -> None:
    mode = [] if any("learner.compile" in o for o in overrides) else ["learner.compile=compile"]
    with pytest.raises(ConfigError, match="learner.compile") as info:
        load_config(path=CARTPOLE, overrides=[*mode, *overrides])
    assert named in str(info.value)


def test_yaml_off_unquoted_is_the_mode_off() -> None:
    assert load_config(path=CARTPOLE, overrides=["learner.compile=off"]).learner.compile == "off"
    assert load_config(path=CARTPOLE, overrides=["learner.compile=graphs"]).learner.compile == "graphs"


def test_the_learner_builds_ppo_with_the_mode_and_refuses_it_for_others() -> None:
    case = make_case(name="ppo", device=torch.device("cpu"), seed=0)
    algo = make_algorithm(config=case.algo.config, compile_mode="graphs")
    assert isinstance(algo, PPO) and algo.compile_mode == "graphs"
    dqn = make_case(name="dqn", device=torch.device("cpu"), seed=0)
    with pytest.raises(ConfigError, match="learner.compile"):
        make_algorithm(config=dqn.algo.config, compile_mode="compile")


def test_compiled_functions_are_cached_per_mode_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    monkeypatch.setattr(compiled_module, "_COMPILED", {})
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None, dynamic=None: made.append(mode) or fn)
    fn = lambda x: x  # noqa: E731
    assert compiled(fn=fn, key=("a",), mode="off") is fn and made == []
    compiled(fn=fn, key=("a",), mode="compile")
    compiled(fn=fn, key=("a",), mode="compile")   # a warm worker's next invocation: no new compile
    compiled(fn=fn, key=("a",), mode="graphs")
    assert made == [None, "reduce-overhead"]


@pytest.mark.slow
def test_a_compiled_ppo_update_equals_the_eager_one() -> None:
    weights = {}
    for mode in ("off", "compile"):
        case = make_case(name="ppo_continuous", device=torch.device("cpu"), seed=0)
        case.algo.compile_mode = mode
        stats = [run_update(case=case, seed=seed) for seed in range(2)]
        weights[mode] = (torch.nn.utils.parameters_to_vector(case.model.parameters()).detach(), stats[-1])
    torch.testing.assert_close(weights["compile"][0], weights["off"][0], rtol=1e-4, atol=1e-5)
    assert weights["compile"][1].num_gradient_steps == weights["off"][1].num_gradient_steps
    assert weights["compile"][1].policy_loss == pytest.approx(weights["off"][1].policy_loss, rel=1e-3, abs=1e-5)
