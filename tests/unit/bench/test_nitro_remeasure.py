"""benchmarks/nitro_remeasure.py at paper scale (issue 30): every arm's config loads on the simulated backend with
I 8..64 and its own profile (each Nitro variant's learner pays its probe), and the moving return that --merge
reports is the trailing mean over at least N episodes, each round weighted by the episodes that ended in it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nimbus.config import load_config
from support import load_benchmark


def _script():
    return load_benchmark("nitro_remeasure")


def _paper_scale_args(module, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["nitro_remeasure.py", "--paper-scale"])
    return module.parse_args()


@pytest.mark.parametrize("arm", ["nitro-paper", "nitro-authors", "fixed-min", "fixed-max", "hydrozoa", "max"])
def test_every_paper_scale_arm_loads_simulated_with_its_profile(arm: str, monkeypatch, tmp_path: Path) -> None:
    script = _script()
    args = _paper_scale_args(script, monkeypatch)
    overrides = [script.scaling_override(arm=arm, min_actors=args.min_actors, max_actors=args.max_actors,
                                         double_every=args.double_every),
                 *script.hessian_overrides(arm=arm, args=args), *args.set, *script.arm_sets(arm=arm, args=args)]
    config = load_config(path=script.REPO / args.config, overrides=overrides)
    assert config.runtime.backend == "simulated" and (args.min_actors, args.max_actors) == (8, 64)
    assert config.actors.fragment_steps == 32 and config.env.num_envs_per_actor == 1
    expected = script.PROBE_PROFILES.get(arm, script.PROFILE)
    assert Path(config.simulation.profile) == expected
    learner = config.simulation.models()["learner"]
    if arm in script.PROBE_PROFILES:                   # the probe's line is on top of the update's
        fixed = script.scaling_override(arm="fixed-min", min_actors=8, max_actors=8, double_every=1)
        plain = load_config(path=script.REPO / args.config, overrides=[fixed, *args.set]).simulation.models()["learner"]
        assert learner.median_s > plain.median_s and learner.per_row_s > plain.per_row_s


def test_the_moving_return_weights_rounds_by_their_episodes_and_waits_for_enough() -> None:
    script = _script()
    rows = [{"episodes": 1, "return_mean": 10.0}, {"episodes": 1, "return_mean": None},     # cumulative episodes:
            {"episodes": 4, "return_mean": 40.0}, {"episodes": 10, "return_mean": 100.0}]  # 1, 0, 3, 6 a round
    moving = script.moving_returns(rows=rows, episodes=3)
    assert moving[:2] == [None, None]                  # 1 episode so far
    assert moving[2] == pytest.approx(40.0)            # round 2 alone holds 3
    assert moving[3] == pytest.approx(100.0)           # round 3 alone holds 3+
    assert script.moving_returns(rows=rows, episodes=4)[2] == pytest.approx((10.0 + 3 * 40.0) / 4)
