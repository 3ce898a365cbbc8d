"""Fit a simulation profile (config/simulation.py ``ProfileFile``) from a real run's ledger: ``nimbus simulate fit``.

Per function kind, from the ledger's attempts (``ledger.jsonl``; prewarm and cancelled rows are not attempts):

* **failure_fraction**: failed attempts (error, timeout, worker_died) over all attempts;
* **stragglers**: the successful attempts longer than ``STRAGGLER_RATIO`` × their median, if they are at most
  ``MAX_STRAGGLER_FRACTION`` of them: their share is ``straggler_fraction``, their median over the others'
  ``straggler_factor``; otherwise none;
* **duration**: the others' log durations: a lognormal with their geometric mean as median and their standard
  deviation as sigma (constant with fewer than ``MIN_LOGNORMAL`` attempts or sigma 0);
* **cold_start_s**: the median ``init_s`` of the cold rows (cold attempts and pre-warms), else 0.

* **per_row_s** (learners only, from several runs): the ledger has no row counts, so a learner's rows come from
  its run's ``config.yaml`` (a fixed scaler's ``num_actors`` × ``env.num_envs_per_actor`` ×
  ``actors.fragment_steps``: the batch a sync learner gets, the leading dimension of its ``indices``). With runs of
  at least two batch sizes, the slope of the median duration over the batch rows (least squares, at least 0) is
  ``per_row_s``, and the rest of the fit is over the durations less ``per_row_s`` × rows.

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
from nimbus.cost.ledger import FAILED_OUTCOMES, Ledger, LedgerRecord
from nimbus.errors import ConfigError

STRAGGLER_RATIO = 3.0
MAX_STRAGGLER_FRACTION = 0.2
MIN_LOGNORMAL = 5


def fit_model(*, records: list[LedgerRecord], rows: list[int] | None = None) -> DurationModel | None:
    """One kind's DurationModel from its ledger rows (module docstring); ``rows``: each record's batch rows (then
    ``per_row_s`` is fitted when they differ). None without a successful attempt."""
    rows = rows if rows is not None else [0] * len(records)
    attempts = [(r, n) for r, n in zip(records, rows) if r.outcome not in ("prewarm", "cancelled")]
    good = [(r.duration_s, n) for r, n in attempts if r.outcome == "ok" and r.duration_s > 0]
    if not good:
        return None
    per_row_s = _per_row_s(good)
    ok = np.array([max(d - per_row_s * n, 1e-6) for d, n in good], dtype=np.float64)
    attempts = [r for r, _ in attempts]
    failures = sum(r.outcome in FAILED_OUTCOMES for r in attempts) / len(attempts)
    median = float(np.median(ok))
    slow = ok > STRAGGLER_RATIO * median
    share = float(slow.mean())
    stragglers = 0.0 < share <= MAX_STRAGGLER_FRACTION
    body = ok[~slow] if stragglers else ok
    logs = np.log(body)
    sigma = float(logs.std(ddof=1)) if body.size >= MIN_LOGNORMAL else 0.0
    colds = [r.init_s for r in records if r.cold and r.init_s > 0]
    return DurationModel(
        distribution="lognormal" if sigma > 0 else "constant", median_s=float(math.exp(logs.mean())),
        sigma=min(sigma, 5.0), cold_start_s=float(np.median(colds)) if colds else 0.0,
        straggler_fraction=share if stragglers else 0.0,
        straggler_factor=max(1.0, float(np.median(ok[slow])) / float(np.median(body))) if stragglers else 1.0,
        failure_fraction=min(failures, 0.99), per_row_s=per_row_s)


def _per_row_s(good: list[tuple[float, int]]) -> float:
    """The least-squares slope (at least 0) of the median duration over the distinct row counts; 0 with one count."""
    levels = sorted({n for _, n in good})
    if len(levels) < 2:
        return 0.0
    medians = [float(np.median([d for d, n in good if n == level])) for level in levels]
    slope = float(np.polyfit(np.array(levels, dtype=np.float64), np.array(medians), 1)[0])
    return max(0.0, slope)


def learner_rows(*, run_dir: Path) -> int:
    """The batch a sync learner of this run gets (module docstring); 0 when the run's config does not say."""
    try:
        config = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))
        scaling = config["actors"]["scaling"]
        if scaling.get("kind") != "fixed":
            return 0
        return int(scaling["num_actors"]) * int(config["env"]["num_envs_per_actor"]) * \
            int(config["actors"]["fragment_steps"])
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        return 0


def fit_profile(*, run_dirs: list[Path]) -> ProfileFile:
    """The profile of the runs in ``run_dirs`` (their ``ledger.jsonl``); ConfigError when one has none."""
    records: list[LedgerRecord] = []
    rows: list[int] = []
    for run_dir in run_dirs:
        path = Path(run_dir) / "ledger.jsonl"
        if not path.is_file():
            raise ConfigError(f"{run_dir}: no ledger.jsonl to fit a simulation profile from")
        loaded = Ledger.load(path=path)
        batch = learner_rows(run_dir=Path(run_dir))
        records += loaded
        rows += [batch if r.kind == "learner" else 0 for r in loaded]
    functions = {}
    for kind in KINDS:
        mine = [(r, n) for r, n in zip(records, rows) if r.kind == kind]
        model = fit_model(records=[r for r, _ in mine], rows=[n for _, n in mine])
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
