"""The duration profiles of benchmarks/artos_paper_scale.py: real local runs of its configs, fitted (issue 30).

Off-policy configs (sac-pendulum, dqn-cartpole, impala-cartpole): one real run each with 2 actors and the paper
scale's fragments, in **lockstep** mode, so that the learner runs while no actor does and its durations are not
slowed by actors sharing this machine's 2 cores (on the simulated cluster actors run on machines of their own). Each
kind is fitted by nimbus.runtime.simulated_fit; the learner's rows per call are its batch indices (gradient steps ×
``algo.batch_size``; IMPALA: the fragments' rows), read from the run's metrics rows (one per accepted learner call, in
order), so ``per_row_s`` is fitted wherever the calls differ in size. PPO (ppo-cartpole, the pre-warming
experiment): real runs with 2 and 4 actors (batches of 256 and 512 rows, the learner's line through both), fitted
by ``fit_profile`` as ``nimbus simulate fit`` does.

Profiles are written to ``benchmarks/results/artos_<config>_profile.yaml`` (``PROFILES``), with a JSON record of the
runs, the load and the time taken beside them (``artos_profiles.json``). A run already under ``root`` (its
summary.json) is reused.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml

import _artos  # (beside this file: the scripts that import this one put the folder on sys.path)
from nimbus.config import load_config
from nimbus.config.renamed import renamed_config
from nimbus.config.simulation import DurationModel, ProfileFile, SimulationConfig, load_profile
from nimbus.cost.ledger import Ledger
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.runtime.simulated_fit import first_attempts, fit_model, fit_profile, write_profile

REPO = Path(__file__).resolve().parents[1]
PROFILES = {name: f"artos_{name}_profile.yaml" for name in
            ("sac-pendulum", "dqn-cartpole", "impala-cartpole", "ppo-cartpole")}
QUIET = (*_artos.QUIET, "seed=0")   # one seed: a profile is fitted from one run per setting
# config → (env steps of the real run, its overrides): 2 actors on this machine, the paper scale's fragments
OFFPOLICY_RUNS = {
    "sac-pendulum": (4096, ("actors.fragment_steps=512",)),
    "dqn-cartpole": (10000, ()),
    "impala-cartpole": (20000, ()),
}
PPO_ACTORS = (2, 4)
PPO_ROUNDS = 12


def resident_learner(*, profile: Path | None, out: Path) -> Path:
    """``profile`` (None: the default model) with the learner resident, as ARTOS's learner processes on the head node
    are: no cold start and no first-call warm-up, so a keep-alive that reclaims idle actors does not restart the
    learner as well. Written to ``out``."""
    loaded = load_profile(path=profile) if profile is not None else ProfileFile(source="the default model")
    learner = loaded.functions.get("learner", SimulationConfig().default)
    return write_profile(profile=loaded.model_copy(update={
        "functions": {**loaded.functions,
                      "learner": learner.model_copy(update={"cold_start_s": 0.0, "first_call_s": 0.0})},
        "source": f"{loaded.source}; learner resident (cold_start_s 0, first_call_s 0)"}), path=out)


def learner_median_s(*, profile: Path | None, rows: int) -> float:
    """The learner's median seconds at ``rows`` in ``profile`` (None, or no learner in it: the default model's)."""
    model = SimulationConfig().default
    if profile is not None:
        model = load_profile(path=profile).functions.get("learner", model)
    return model.median_s + model.per_row_s * rows


def real_run(*, name: str, run_dir: Path, overrides: list[str]) -> Path:
    """One real run of configs/<name>.yaml on the local backend; an earlier one under ``run_dir`` is reused."""
    if (run_dir / "summary.json").is_file():
        return run_dir
    config = load_config(path=REPO / "configs" / f"{name}.yaml",
                         overrides=[*QUIET, *overrides, f"output.root_dir={run_dir.parent}"])
    return train(config=config, run_dir=run_dir).run_dir


def offpolicy_learner(*, run_dir: Path) -> DurationModel | None:
    """The learner's model with each call's rows (gradient steps × rows per step) from the metrics rows."""
    config = renamed_config(data=yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")), warn=False)
    algo, env, actors = config["algo"], config["env"], config["actors"]
    records = [r for r in Ledger.load(path=run_dir / "ledger.jsonl") if r.kind == "learner"]
    accepted = sorted((i for i, r in enumerate(records) if r.outcome == "ok"), key=lambda i: records[i].end_at)
    rows = read_metrics(path=run_dir / "metrics.jsonl")
    if len(accepted) != len(rows):
        raise ValueError(f"{run_dir}: {len(accepted)} accepted learner calls but {len(rows)} metrics rows")
    per_step = env["num_envs_per_actor"] * actors["fragment_steps"] * config["offpolicy"]["fragments_per_batch"] \
        if algo["name"] == "impala" else algo["batch_size"]
    batch = [0] * len(records)
    for i, row in zip(accepted, rows):
        batch[i] = int(round(float(row["extras"]["gradient_steps"]))) * per_step
    return fit_model(records=records, rows=batch, first=first_attempts(records=records))


def take_profiles(*, root: Path, out_dir: Path) -> dict:
    """Every profile (module docstring); returns the record also written to ``out_dir/artos_profiles.json``."""
    started, load_before = time.perf_counter(), os.getloadavg()
    record: dict = {"profiles": {}}
    for name, (steps, sets) in OFFPOLICY_RUNS.items():
        run_dir = real_run(name=name, run_dir=root / f"{name}-lockstep", overrides=[
            *sets, "actors.scaling.num_actors=2", f"train.total_env_steps={steps}", "offpolicy.lockstep=true"])
        profile = fit_profile(run_dirs=[run_dir])
        learner = offpolicy_learner(run_dir=run_dir)
        functions = {**profile.functions, **({"learner": learner} if learner is not None else {})}
        path = write_profile(profile=profile.model_copy(update={
            "functions": functions, "source": f"{run_dir} (learner rows from its metrics)"}),
            path=out_dir / PROFILES[name])
        record["profiles"][name] = {"path": str(path), "runs": [str(run_dir)],
                                    "functions": {k: v.model_dump(mode="json") for k, v in functions.items()}}
    ppo_dirs = [real_run(name="ppo-cartpole", run_dir=root / f"ppo-cartpole-{actors}", overrides=[
        f"actors.scaling.num_actors={actors}", f"train.max_rounds={PPO_ROUNDS}", "train.total_env_steps=10000000"])
        for actors in PPO_ACTORS]
    profile = fit_profile(run_dirs=ppo_dirs)
    path = write_profile(profile=profile, path=out_dir / PROFILES["ppo-cartpole"])
    record["profiles"]["ppo-cartpole"] = {
        "path": str(path), "runs": [str(d) for d in ppo_dirs],
        "functions": {k: v.model_dump(mode="json") for k, v in profile.functions.items()}}
    record.update(real_s=time.perf_counter() - started, load_avg_before=load_before, load_avg_after=os.getloadavg(),
                  cpus=os.cpu_count())
    (out_dir / "artos_profiles.json").write_text(json.dumps(record, indent=1))
    return record
