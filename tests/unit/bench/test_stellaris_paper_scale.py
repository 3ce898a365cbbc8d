"""benchmarks/stellaris_paper_scale.py (issue 30): reward at equal time and cost reads each run's curve at a budget
common to every arm, and the derived profile adds the straggler tail to the gradient learner only."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config.simulation import DurationModel, ProfileFile, load_profile
from nimbus.runtime.simulated_fit import write_profile
from support import load_benchmark


def _script():
    return load_benchmark("stellaris_paper_scale")


def _run(module, *, arm: str, seed: int, curve: list[tuple[float, float, float]]):
    return module.Run(arm=arm, seed=seed, eval_return=0.0, final_return=0.0, tail_variance=0.0, cost_usd=curve[-1][1],
                      wall_s=curve[-1][0], env_steps=0, time_to_target_s=None, cost_to_target_usd=None,
                      parameter_wall_share=0.0, refused_share=0.0, optimizer_steps=0, gradients_per_aggregation=1.0,
                      curve=curve)


def test_reward_at_equal_time_is_each_runs_return_at_the_fastest_arms_median_time() -> None:
    paper = _script()
    slow = [_run(paper, arm="ppo", seed=s, curve=[(10.0, 1.0, 20.0), (20.0, 2.0, 40.0), (40.0, 4.0, 90.0)])
            for s in range(3)]
    fast = [_run(paper, arm="async", seed=s, curve=[(5.0, 3.0, 30.0), (12.0 + s, 6.0, 60.0 + s)]) for s in range(3)]
    budget, found = paper.at_budget(runs=slow + fast, axis=0)
    assert budget == 13.0                                  # async's median final time (12, 13, 14), below ppo's 40
    assert found["ppo"] == [20.0, 20.0, 20.0]              # ppo's last round ending by 13 s
    assert found["async"] == [60.0, 61.0, 30.0]            # seed 2 ended at 14 s: its round ending by 13 s
    budget, found = paper.at_budget(runs=slow + fast, axis=1)
    assert budget == 4.0 and found["ppo"] == [90.0] * 3 and found["async"] == [30.0] * 3


def test_the_tailed_profile_changes_only_the_gradient_learners_straggler_model(tmp_path: Path) -> None:
    paper = _script()
    fitted = ProfileFile(source="real", functions={
        "actor": DurationModel(distribution="lognormal", median_s=0.3, sigma=0.2),
        "gradient_learner": DurationModel(distribution="lognormal", median_s=0.01, sigma=0.4, cold_start_s=2.0)})
    path = paper.tailed_profile(profile=write_profile(profile=fitted, path=tmp_path / "fit.yaml"), fraction=0.0625,
                                factor=4.0, out=tmp_path / "tailed.yaml")
    tailed = load_profile(path=path)
    assert tailed.functions["actor"] == fitted.functions["actor"]
    learner = tailed.functions["gradient_learner"]
    assert (learner.straggler_fraction, learner.straggler_factor) == (0.0625, 4.0)
    assert (learner.median_s, learner.sigma, learner.cold_start_s) == (0.01, 0.4, 2.0)
    # a profile without a gradient learner (not from a Stellaris run) is refused, naming the key
    with pytest.raises(ValueError, match=r"functions\.gradient_learner: missing"):
        paper.tailed_profile(profile=write_profile(profile=ProfileFile(functions={"actor": fitted.functions["actor"]}),
                                                   path=tmp_path / "actor.yaml"),
                             fraction=0.1, factor=2.0, out=tmp_path / "x.yaml")


def test_time_and_cost_to_a_target_are_read_off_the_curve_at_the_first_round_reaching_it() -> None:
    paper = _script()
    run = _run(paper, arm="ppo", seed=0, curve=[(1.0, 0.1, float("nan")), (2.0, 0.2, 40.0), (3.0, 0.3, 60.0),
                                                (4.0, 0.4, 45.0), (5.0, 0.5, 80.0)])
    assert (paper.retargeted(run=run, target=50.0).time_to_target_s,
            paper.retargeted(run=run, target=50.0).cost_to_target_usd) == (3.0, 0.3)
    assert paper.retargeted(run=run, target=100.0).time_to_target_s is None


def test_collect_refuses_a_directory_that_is_not_a_finished_arm_run(tmp_path: Path) -> None:
    paper = _script()
    for name in ("notes", "bogus-s0", "ppo-s0"):      # no -s<seed>; an unknown arm; no summary.json (unfinished)
        (tmp_path / name).mkdir()
        with pytest.raises(ValueError, match="not a finished run directory"):
            paper.collected(run_dir=tmp_path / name, eval_episodes=1, tail=1, target=1.0)


def _paper_run(module, *, arm: str, seed: int, curve: list[tuple[float, float, float]], excl: list[float]):
    return module.PaperRun(**vars(_run(module, arm=arm, seed=seed, curve=curve)), cost_excl_cold_usd=excl[-1],
                           curve_excl_cold=excl)


def test_both_bills_to_a_target_are_read_at_the_same_round_and_compared_at_the_common_target() -> None:
    paper = _script()
    curve = [(1.0, 0.10, 20.0), (2.0, 0.20, 60.0), (3.0, 0.30, 120.0)]
    ppo = [_paper_run(paper, arm="ppo", seed=s, curve=curve, excl=[0.05, 0.15, 0.25]) for s in range(3)]
    stellaris = [_paper_run(paper, arm="stellaris", seed=s, curve=[(1.0, 0.2, 30.0), (2.0, 0.4, 70.0 + s)],
                            excl=[0.1, 0.2]) for s in range(3)]
    hit = paper.retargeted(run=ppo[0], target=50.0)
    assert (hit.cost_to_target_usd, hit.cost_excl_cold_to_target_usd) == (0.20, 0.15)   # round 2's two bills
    assert paper.retargeted(run=ppo[0], target=500.0).cost_excl_cold_to_target_usd is None
    assert paper.common_target(runs=ppo + stellaris) == 70.0          # stellaris seed 0 peaks at 70
    runs = [paper.retargeted(run=r, target=100.0) for r in ppo + stellaris]
    summary = paper.summarize(runs=runs, learned=0.0)
    assert summary["ppo"]["cost_to_target_excl_cold_usd"]["iqm"] == pytest.approx(0.25)
    assert summary["stellaris"]["cost_to_target_excl_cold_usd"] is None           # never reached 100
    assert summary["stellaris"]["cost_to_common_target_excl_cold_usd"]["iqm"] == pytest.approx(0.2)
    assert summary["ppo"]["cost_to_common_target_usd"]["iqm"] == pytest.approx(0.3)   # 120 is ppo's first >= 70
    assert summary["stellaris"]["cost_excl_cold_usd"]["iqm"] == pytest.approx(0.2)
    lines = "\n".join(paper.cost_claims(summary))
    assert "total cost, excl. cold starts: stellaris 0.2" in lines and "cost to 70" in lines
