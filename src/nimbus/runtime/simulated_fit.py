"""Fit a simulation profile (config/simulation.py ``ProfileFile``) from a real run's ledger: ``nimbus simulate fit``.

Per function kind, from the ledger's attempts (``ledger.jsonl``; prewarm and cancelled rows are not attempts):

* **failure_fraction**: failed attempts (error, timeout, worker_died) over all attempts;
* **first_call_s**: each worker's first attempt (after its cold start) carries its warm-up (first env reset, first
  torch call: 1.4-3.3x the median here). First attempts are left out of everything below (with at least
  ``MIN_LOGNORMAL`` other successes) and ``first_call_s`` is their median excess over the fitted median (at
  least 0): a once-per-worker term, not an i.i.d. straggler;
* **per_row_s** (learners only, from several runs): the ledger has no row counts, so a learner's rows come from
  its run's ``config.yaml`` (a fixed scaler's ``num_actors`` × ``env.num_envs_per_actor`` ×
  ``actors.fragment_steps``: the batch an onpolicy learner gets, the leading dimension of its ``indices``). With runs of
  at least two batch sizes, a line through the median duration per batch size (least squares, slope at least 0,
  intercept at least ``MIN_INTERCEPT_SHARE`` of the smallest median) gives the median at each batch size;
* the rest is fitted on each success's **ratio** to that median (``distribution: lognormal`` multiplies the
  whole compute term ``median_s + per_row_s × rows``): **stragglers** are the ratios over ``STRAGGLER_RATIO`` ×
  their median if they are at most ``MAX_STRAGGLER_FRACTION`` of them (their share is ``straggler_fraction``,
  their median over the others' ``straggler_factor``); the others' log ratios give ``sigma`` (0, a constant,
  with fewer than ``MIN_LOGNORMAL``) and their geometric mean scales the line into ``median_s`` and ``per_row_s``.
  (Fitting a lognormal to durations *less* the row term made the residual of a near-zero intercept a tail:
  residuals clamped to 1e-6 gave sigma 4.6 and simulated learner calls of 4-40 s, which put the simulated bill
  far off the real run's.)
* **cold_start_s**: the median ``init_s`` of the cold rows (cold attempts and pre-warms), else 0.

Bytes are not in the ledger either, so ``bandwidth_bytes_per_s`` is not fitted (add it by hand). A kind with no
successful attempt is left out (the config's ``default`` applies).

Example::

    profile = fit_profile(run_dirs=[Path("runs/ppo-1-actor"), Path("runs/ppo-2-actors")])
    write_profile(profile=profile, path=Path("profile.yaml"))   # simulation: {profile: profile.yaml}
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from nimbus.config.simulation import KINDS, DurationModel, ProfileFile
from nimbus.config.yaml_loader import parse_yaml
from nimbus.cost.ledger import FAILED_OUTCOMES, Ledger, LedgerRecord
from nimbus.errors import ConfigError

STRAGGLER_RATIO = 3.0
MAX_STRAGGLER_FRACTION = 0.2
MIN_LOGNORMAL = 5
MIN_INTERCEPT_SHARE = 0.05   # a learner's time at 0 rows: at least this share of its smallest batch's median


def fit_model(*, records: list[LedgerRecord], rows: list[int] | None = None,
              first: list[bool] | None = None) -> DurationModel | None:
    """One kind's DurationModel from its ledger rows (module docstring); ``rows``: each record's batch rows (then
    ``per_row_s`` is fitted when they differ); ``first``: whether each is its worker's first attempt (default: from
    the records' worker ids, one run). None without a successful attempt."""
    rows = rows if rows is not None else [0] * len(records)
    first = first if first is not None else first_attempts(records=records)
    attempts = [(r, n, f) for r, n, f in zip(records, rows, first) if r.outcome not in ("prewarm", "cancelled")]
    good = [(r.duration_s, n, f) for r, n, f in attempts if r.outcome == "ok" and r.duration_s > 0]
    if not good:
        return None
    steady = [(d, n) for d, n, f in good if not f]
    if len(steady) < MIN_LOGNORMAL:   # too few to tell a first call's warm-up apart: fit them all
        steady, good = [(d, n) for d, n, _ in good], [(d, n, False) for d, n, _ in good]
    intercept_s, per_row_s = _affine(steady)
    ratios = np.array([d / (intercept_s + per_row_s * n) for d, n in steady], dtype=np.float64)
    slow = ratios > STRAGGLER_RATIO * float(np.median(ratios))
    share = float(slow.mean())
    stragglers = 0.0 < share <= MAX_STRAGGLER_FRACTION
    body = ratios[~slow] if stragglers else ratios
    logs = np.log(body)
    scale = float(math.exp(logs.mean()))
    sigma = float(logs.std(ddof=1)) if body.size >= MIN_LOGNORMAL else 0.0
    sigma = sigma if sigma > 1e-9 else 0.0   # equal durations: a constant, not a lognormal of rounding error
    warmups = [d - (intercept_s + per_row_s * n) * scale for d, n, f in good if f]
    colds = [r.init_s for r in records if r.cold and r.init_s > 0]
    failures = sum(r.outcome in FAILED_OUTCOMES for r, _, _ in attempts) / len(attempts)
    return DurationModel(
        distribution="lognormal" if sigma > 0 else "constant", median_s=intercept_s * scale,
        sigma=min(sigma, 5.0), per_row_s=per_row_s * scale, cold_start_s=float(np.median(colds)) if colds else 0.0,
        first_call_s=max(0.0, float(np.median(warmups))) if warmups else 0.0,
        straggler_fraction=share if stragglers else 0.0,
        straggler_factor=max(1.0, float(np.median(ratios[slow])) / float(np.median(body))) if stragglers else 1.0,
        failure_fraction=min(failures, 0.99))


def first_attempts(*, records: list[LedgerRecord]) -> list[bool]:
    """Per record, whether it is its worker's first attempt (by ``start_at``; pre-warm and cancelled rows are not
    attempts). One run's records: worker ids repeat across runs."""
    order = sorted((r.start_at, i) for i, r in enumerate(records) if r.outcome not in ("prewarm", "cancelled"))
    seen: set[str] = set()
    first = [False] * len(records)
    for _, i in order:
        first[i] = records[i].worker_id not in seen
        seen.add(records[i].worker_id)
    return first


def _affine(steady: list[tuple[float, int]]) -> tuple[float, float]:
    """(intercept_s, per_row_s): the least-squares line of the median duration over the distinct row counts, slope
    at least 0 and intercept at least ``MIN_INTERCEPT_SHARE`` of the smallest median (then the slope is refitted
    through that intercept); (median, 0) with one row count."""
    levels = sorted({n for _, n in steady})
    medians = np.array([float(np.median([d for d, n in steady if n == level])) for level in levels])
    if len(levels) < 2:
        return float(medians[0]), 0.0
    x = np.array(levels, dtype=np.float64)
    slope = max(0.0, float(np.polyfit(x, medians, 1)[0]))
    intercept = float(medians.mean() - slope * x.mean())
    floor = MIN_INTERCEPT_SHARE * float(medians.min())
    if intercept < floor:
        intercept = floor
        slope = max(0.0, float(np.dot(x, medians - floor) / np.dot(x, x)))
    return intercept, slope


def learner_rows(*, run_dir: Path) -> int:
    """The batch an onpolicy learner of this run gets (module docstring); 0 when the run's config does not say."""
    path = Path(run_dir) / "config.yaml"
    try:
        config = parse_yaml(text=path.read_text(encoding="utf-8"), source=str(path))   # guarded: exit 2 on a bomb
        scaling = config["actors"]["scaling"]
        if scaling.get("kind") != "fixed":
            return 0
        return int(scaling["num_actors"]) * int(config["env"]["num_envs_per_actor"]) * \
            int(config["actors"]["fragment_steps"])
    except (OSError, KeyError, TypeError, ValueError):
        return 0


def fit_profile(*, run_dirs: list[Path]) -> ProfileFile:
    """The profile of the runs in ``run_dirs`` (their ``ledger.jsonl``); ConfigError when one has none."""
    records: list[LedgerRecord] = []
    rows: list[int] = []
    first: list[bool] = []
    for run_dir in run_dirs:
        path = Path(run_dir) / "ledger.jsonl"
        if not path.is_file():
            raise ConfigError(f"{run_dir}: no ledger.jsonl to fit a simulation profile from")
        loaded = Ledger.load(path=path)
        batch = learner_rows(run_dir=Path(run_dir))
        records += loaded
        rows += [batch if r.kind == "learner" else 0 for r in loaded]
        first += first_attempts(records=loaded)
    functions = {}
    for kind in KINDS:
        mine = [(r, n, f) for r, n, f in zip(records, rows, first) if r.kind == kind]
        model = fit_model(records=[r for r, _, _ in mine], rows=[n for _, n, _ in mine], first=[f for _, _, f in mine])
        if model is not None:
            functions[kind] = model
    if not functions:
        raise ConfigError(f"{', '.join(map(str, run_dirs))}: no successful attempt to fit a simulation profile from")
    return ProfileFile(source=", ".join(str(d) for d in run_dirs), functions=functions)


def write_profile(*, profile: ProfileFile, path: Path) -> Path:
    """Write ``profile`` as YAML (what ``simulation.profile`` loads)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# nimbus simulation profile (nimbus simulate fit); load it with simulation.profile\n" +
                    yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    return path
