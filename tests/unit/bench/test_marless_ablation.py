"""benchmarks/marless_ablation.py's heterogeneous env (issue 27, Show the effect): ``--env adversary`` runs every arm
on mpe2 simple_adversary, skips ``full`` (one network cannot take the adversary's 8 and the agents' 10 numbers) with
the config error's reason, and compares each arm with that env's uniform-random return."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.errors import ConfigError
from support import load_benchmark

pytest.importorskip("mpe2")
def _script():
    return load_benchmark("marless_ablation")


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


def test_merge_summarises_the_runs_of_several_files_as_one_and_refuses_a_run_twice(tmp_path: Path) -> None:
    ablation = _script()
    def run(arm: str, seed: int, eval_return: float) -> object:
        return ablation.Run(arm=arm, agents=3, seed=seed, eval_return=eval_return, learner_cost_usd=1.0 + seed,
                            actor_cost_usd=0.5, total_cost_usd=1.5 + seed, mean_actors=12.0, mean_policies=3.0,
                            toggles=0, env_steps=90000, wall_s=1.0)
    plain = [run("per-agent", seed, -21.0 - seed) for seed in range(3)]
    ours = [run("marless", seed, -22.0 - seed) for seed in range(3)]
    machine = {"load_1m_before": 1.0}
    for name, runs in (("a.json", plain), ("b.json", ours)):
        ablation.write(output=tmp_path / name, runs=runs, skipped={}, machine=machine, env="spread", rounds=150)
    ablation.merge(paths=[tmp_path / "a.json", tmp_path / "b.json"], output=tmp_path / "all.json")
    ablation.write(output=tmp_path / "one.json", runs=plain + ours, skipped={}, machine=machine, env="spread",
                   rounds=150)
    merged, one = (__import__("json").loads((tmp_path / n).read_text()) for n in ("all.json", "one.json"))
    assert merged["summary"] == one["summary"] and merged["claims"] == one["claims"]
    assert "N3/marless_vs_per-agent" in merged["claims"]                  # the cross-file comparison exists
    assert set(merged["machine"]["sources"]) == {str(tmp_path / "a.json"), str(tmp_path / "b.json")}
    with pytest.raises(SystemExit, match="appears in two files"):
        ablation.merge(paths=[tmp_path / "a.json", tmp_path / "a.json"], output=tmp_path / "twice.json")


def test_env_steps_stops_the_arms_at_equal_samples_instead_of_equal_rounds(tmp_path: Path) -> None:
    ablation = _script()
    from nimbus.config import load_config
    def train_section(**kw):
        config = load_config(path=ablation.CONFIG, overrides=ablation.overrides(
            extra=ablation.ARMS["marless"], agents=6, seed=0, rounds=150, root=tmp_path, eval_episodes=0, **kw))
        return config.train.max_rounds, config.train.total_env_steps
    assert train_section() == (150, 100_000_000)                   # equal rounds: the step budget never binds
    rounds, steps = train_section(env_steps=90_000)
    assert steps == 90_000 and rounds >= 90_000 // (2 * 2 * 25)   # enough rounds at I_min = 2 actors of 2 envs


def test_a_profile_runs_the_arms_simulated_at_its_actor_counts(tmp_path: Path) -> None:
    """``--profile`` (issue 30): every arm on the simulated backend with the fitted durations, no worker cap, and
    ``--i-max`` actors of ``--envs-per-actor`` envs; without it, real runs capped at 16 workers."""
    ablation = _script()
    from nimbus.config import load_config
    profile = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "marless_n6_profile.yaml"
    def runtime_of(scale):
        config = load_config(path=ablation.CONFIG, overrides=ablation.overrides(
            extra=ablation.ARMS["per-agent"], agents=6, seed=0, rounds=3, root=tmp_path, eval_episodes=0, scale=scale))
        return (config.runtime.backend, config.runtime.max_workers, config.marless.i_max, config.env.num_envs_per_actor,
                config.simulation.profile is not None)
    assert runtime_of(ablation.Scale()) == ("local", 16, 12, 2, False)
    assert runtime_of(ablation.Scale(i_max=50, envs_per_actor=1, profile=profile)) == ("simulated", None, 50, 1, True)
