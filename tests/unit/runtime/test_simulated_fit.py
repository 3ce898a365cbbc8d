"""Fitting a simulation profile from a ledger (runtime/simulated_fit.py): lognormal durations, stragglers, failures
and cold starts recovered from rows drawn with known values; the YAML round-trips through simulation.profile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nimbus.config.simulation import DurationModel, SimulationConfig, load_profile
from nimbus.cost.ledger import Ledger, attempt_record
from nimbus.errors import ConfigError
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.simulated_durations import draw_attempt
from nimbus.runtime.simulated_fit import fit_model, fit_profile, write_profile


def ledger_from(*, model: DurationModel, kind: str, n: int, path: Path, seed: int = 0) -> None:
    """A ledger of ``n`` attempts drawn from ``model`` (deaths as worker_died rows, the first one cold)."""
    spec = FunctionSpec(name=kind, entrypoint="x:y", kind=kind)
    rng, ledger, at = np.random.default_rng(seed), Ledger(path=path), 0.0
    for i in range(n):
        draw = draw_attempt(model=model, rng=rng, rows=0, nbytes=0)
        end = at + (draw.dies_after_s if draw.dies else draw.duration_s)
        ledger.append(record=attempt_record(
            spec=spec, invocation_id=f"{kind}-{i}", attempt=1, worker_id="w", cold=i == 0, init_s=model.cold_start_s,
            queued_at=at, start_at=at, end_at=end, outcome="worker_died" if draw.dies else "ok", error_type=None))
        at = end
    ledger.close()


def test_fit_recovers_the_model_the_rows_were_drawn_from(tmp_path: Path) -> None:
    truth = DurationModel(distribution="lognormal", median_s=0.4, sigma=0.3, cold_start_s=2.5,
                          straggler_fraction=0.05, straggler_factor=8.0, failure_fraction=0.1)
    ledger_from(model=truth, kind="actor", n=3000, path=tmp_path / "ledger.jsonl")
    fitted = fit_profile(run_dirs=[tmp_path]).functions["actor"]
    assert fitted.distribution == "lognormal"
    assert fitted.median_s == pytest.approx(0.4, rel=0.05) and fitted.sigma == pytest.approx(0.3, rel=0.1)
    assert fitted.straggler_fraction == pytest.approx(0.05, abs=0.015)
    assert fitted.straggler_factor == pytest.approx(8.0, rel=0.15)
    assert fitted.failure_fraction == pytest.approx(0.1, abs=0.02) and fitted.cold_start_s == 2.5


def test_few_rows_give_a_constant_and_no_successes_give_nothing() -> None:
    spec = FunctionSpec(name="l", entrypoint="x:y", kind="learner")
    rows = [attempt_record(spec=spec, invocation_id=str(i), attempt=1, worker_id="w", cold=False, init_s=0.0,
                           queued_at=0.0, start_at=0.0, end_at=d, outcome="ok", error_type=None)
            for i, d in enumerate((1.0, 2.0))]
    model = fit_model(records=rows)
    assert model.distribution == "constant" and model.median_s == pytest.approx(2 ** 0.5)
    assert fit_model(records=[]) is None


def test_the_written_profile_loads_and_functions_override_it(tmp_path: Path) -> None:
    ledger_from(model=DurationModel(median_s=0.7, cold_start_s=0.0), kind="learner", n=10,
                path=tmp_path / "ledger.jsonl")
    path = write_profile(profile=fit_profile(run_dirs=[tmp_path]), path=tmp_path / "p.yaml")
    assert load_profile(path=path).functions["learner"].median_s == pytest.approx(0.7)
    config = SimulationConfig(profile=str(path), functions={"actor": DurationModel(median_s=3.0)})
    models = config.models()
    assert models["learner"].median_s == pytest.approx(0.7) and models["actor"].median_s == 3.0
    with pytest.raises(ConfigError, match="no ledger"):
        fit_profile(run_dirs=[tmp_path / "missing"])
    (tmp_path / "bad.yaml").write_text("functions: {actor: {median_s: -1}}\n")
    with pytest.raises(ValueError, match="functions.actor.median_s"):
        load_profile(path=tmp_path / "bad.yaml")


def test_runs_of_two_batch_sizes_fit_the_learners_per_row_time(tmp_path: Path) -> None:
    """A learner's rows come from its run's config (num_actors x envs x fragment steps): 0.1 s + 1 ms a row."""
    runs = []
    for actors in (1, 2):
        run = tmp_path / f"run{actors}"
        rows = actors * 4 * 32
        ledger_from(model=DurationModel(median_s=0.1 + 0.001 * rows, cold_start_s=0.0), kind="learner", n=6,
                    path=run / "ledger.jsonl")
        (run / "config.yaml").write_text(f"env: {{num_envs_per_actor: 4}}\nactors: {{fragment_steps: 32, scaling: "
                                         f"{{kind: fixed, num_actors: {actors}}}}}\n")
        runs.append(run)
    learner = fit_profile(run_dirs=runs).functions["learner"]
    assert learner.per_row_s == pytest.approx(0.001) and learner.median_s == pytest.approx(0.1)
    assert fit_profile(run_dirs=runs[:1]).functions["learner"].per_row_s == 0.0   # one batch size: no slope


def test_a_hardware_file_speeds_kinds_up_and_sets_the_network(tmp_path: Path) -> None:
    (tmp_path / "hw.yaml").write_text("description: V100 learners, 10 Gb/s\nspeedup: {learner: 8.0}\n"
                                      "bandwidth_bytes_per_s: 1.25e9\n")
    config = SimulationConfig(hardware=str(tmp_path / "hw.yaml"),
                              functions={"learner": DurationModel(median_s=4.0, per_row_s=0.008),
                                         "actor": DurationModel(median_s=0.5, bandwidth_bytes_per_s=1e6)})
    models = config.models()
    assert (models["learner"].median_s, models["learner"].per_row_s) == (0.5, 0.001)
    assert models["learner"].bandwidth_bytes_per_s == 1.25e9
    assert models["actor"].median_s == 0.5 and models["actor"].bandwidth_bytes_per_s == 1e6   # its own wins
    assert models["parameter"].median_s == config.default.median_s                              # untouched
    (tmp_path / "bad.yaml").write_text("speedup: {learner: 0}\n")
    with pytest.raises(ValueError, match="speedup"):
        SimulationConfig(hardware=str(tmp_path / "bad.yaml"))


def records_of(*, durations: list[float], kind: str, worker: str = "w") -> list:
    spec = FunctionSpec(name=kind, entrypoint="x:y", kind=kind)
    out, at = [], 0.0
    for i, d in enumerate(durations):
        out.append(attempt_record(spec=spec, invocation_id=f"{kind}-{i}", attempt=1, worker_id=worker, cold=False,
                                  init_s=0.0, queued_at=at, start_at=at, end_at=at + d, outcome="ok", error_type=None))
        at += d
    return out


def test_a_first_call_warm_up_is_a_once_per_worker_term_not_a_per_call_straggler() -> None:
    """The issue-30 record: each actor's first call took ~7x the median (warm-up); the fit called it an i.i.d.
    straggler (1/64 of calls, x7), which the simulation then drew on any call."""
    rng = np.random.default_rng(0)
    steady = list(0.02 * np.exp(0.1 * rng.standard_normal(63)))
    model = fit_model(records=records_of(durations=[0.14] + steady, kind="actor"))
    assert model.straggler_fraction == 0.0 and model.straggler_factor == 1.0
    assert model.first_call_s == pytest.approx(0.12, abs=0.005)
    assert model.median_s == pytest.approx(0.02, rel=0.05) and model.sigma == pytest.approx(0.1, rel=0.3)
    flat = fit_model(records=records_of(durations=[0.02] * 10, kind="actor"))   # no warm-up: no term
    assert flat.first_call_s == pytest.approx(0.0, abs=1e-12) and flat.distribution == "constant"


def test_two_batch_sizes_with_a_near_zero_intercept_give_no_heavy_tail(tmp_path: Path) -> None:
    """Seeds 1-2 of the issue-30 record: learner time ~ per_row_s x rows with almost no intercept. Fitting a
    lognormal to durations less the row term clamped half of them to 1e-6 (sigma 4.6, simulated calls of 4-40 s,
    cost +206..+1232 %). The spread is now fitted on each duration's ratio to the line."""
    runs = []
    for actors in (1, 2):
        run = tmp_path / f"run{actors}"
        batch = actors * 4 * 32
        ledger_from(model=DurationModel(distribution="lognormal", median_s=0.0005 + 0.00035 * batch, sigma=0.2,
                                        cold_start_s=0.0), kind="learner", n=60, path=run / "ledger.jsonl", seed=actors)
        (run / "config.yaml").write_text(f"env: {{num_envs_per_actor: 4}}\nactors: {{fragment_steps: 32, scaling: "
                                         f"{{kind: fixed, num_actors: {actors}}}}}\n")
        runs.append(run)
    learner = fit_profile(run_dirs=runs).functions["learner"]
    assert learner.sigma == pytest.approx(0.2, abs=0.06)
    assert learner.per_row_s == pytest.approx(0.00035, rel=0.15)
    rng = np.random.default_rng(0)
    draws = [draw_attempt(model=learner, rng=rng, rows=128, nbytes=0).duration_s for _ in range(2000)]
    assert max(draws) < 5 * float(np.median(draws))   # the tail of a sigma-0.2 lognormal, not of sigma 4.6


def test_every_function_role_is_a_simulated_kind_and_a_stellaris_learner_is_fitted(tmp_path: Path) -> None:
    """Stellaris's learners are kind gradient_learner: it was no kind of the simulation's, so a profile could not
    name it, a fit dropped it, and a simulated Stellaris run drew its learners from ``default``."""
    from nimbus.config.sections import ROLES
    from nimbus.config.simulation import KINDS

    assert set(ROLES) <= set(KINDS)
    ledger_from(model=DurationModel(median_s=0.3, cold_start_s=0.0), kind="gradient_learner", n=10,
                path=tmp_path / "ledger.jsonl")
    profile = fit_profile(run_dirs=[tmp_path])
    assert profile.functions["gradient_learner"].median_s == pytest.approx(0.3)
    path = write_profile(profile=profile, path=tmp_path / "p.yaml")
    assert SimulationConfig(profile=str(path)).models()["gradient_learner"].median_s == pytest.approx(0.3)


@pytest.mark.parametrize("algo", ["ippo", "mappo", "iql", "vdn", "qmix"])
def test_every_marless_role_is_a_simulated_kind_and_a_policy_function_is_fitted(tmp_path: Path, algo: str) -> None:
    """MARLess's function kinds are its roles (marless/parts.py function_specs): ``policy`` was no kind of the
    simulation's, so a simulated MARLess run drew its policy functions from ``default`` and a fit dropped them."""
    from nimbus.algos.multiagent import MULTIAGENT_ALGO_CONFIGS, make_multiagent_algo
    from nimbus.config.simulation import KINDS

    roles = make_multiagent_algo(config=MULTIAGENT_ALGO_CONFIGS[algo]()).roles
    assert {"actor", *roles} <= set(KINDS)
    ledger_from(model=DurationModel(median_s=0.2, cold_start_s=0.0), kind="policy", n=10,
                path=tmp_path / "ledger.jsonl")
    assert fit_profile(run_dirs=[tmp_path]).functions["policy"].median_s == pytest.approx(0.2)
    assert SimulationConfig(functions={"policy": DurationModel(median_s=0.5)}).models()["policy"].median_s == 0.5
