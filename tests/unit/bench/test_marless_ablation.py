"""benchmarks/marless_ablation.py's heterogeneous env (issue 27, Show the effect): ``--env adversary`` runs every arm
on mpe2 simple_adversary, skips ``full`` (one network cannot take the adversary's 8 and the agents' 10 numbers) with
the config error's reason, and compares each arm with that env's uniform-random return."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import nimbus.config  # noqa: F401  (first: nimbus.config.root imports nimbus.marless.config, a cycle otherwise)
from nimbus.errors import ConfigError

pytest.importorskip("mpe2")
SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "marless_ablation.py"


def _script():
    spec = importlib.util.spec_from_file_location("marless_ablation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["marless_ablation"] = module        # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_full_sharing_on_the_heterogeneous_env_is_refused_with_its_reason(tmp_path: Path) -> None:
    ablation = _script()
    with pytest.raises(ConfigError, match=r"^marless\.sharing: full needs every agent to have the same spaces"):
        ablation.run_arm(arm="full", agents=2, seed=0, rounds=1, root=tmp_path, eval_episodes=0, env="adversary")


def test_the_claims_compare_each_arm_with_the_envs_own_random_return() -> None:
    ablation = _script()
    def arm(eval_return: float, cost: float) -> dict:
        point = {name: {"point": cost, "low": None, "high": None} for name in ablation.METRICS}
        return {**point, "eval_return": {"point": eval_return, "low": None, "high": None}}
    summary = {"adversary-N2/marless": arm(-4.0, 1.0), "adversary-N2/static": arm(-5.0, 2.0)}
    claims = ablation.claims(summary)
    assert claims["adversary-N2/above_random"] == pytest.approx({"marless": -4.0 + 5.20, "static": -5.0 + 5.20})
    assert claims["adversary-N2/marless_vs_static"]["learner_cost_ratio"] == pytest.approx(0.5)
    assert ablation.label(env="spread", agents=3) == "N3"                  # simple_spread keys as before


def test_the_uniform_random_return_is_seeded() -> None:
    ablation = _script()
    first = ablation.uniform_random_return(env="adversary", agents=2, episodes=3, seed=0)
    assert first == ablation.uniform_random_return(env="adversary", agents=2, episodes=3, seed=0)
    assert first != ablation.uniform_random_return(env="adversary", agents=2, episodes=3, seed=1)
