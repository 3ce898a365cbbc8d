"""Fit a simulation profile (config/simulation.py ``ProfileFile``) from a real run's ledger: ``nimbus simulate fit``.

Per function kind, from the ledger's attempts (``ledger.jsonl``; prewarm and cancelled rows are not attempts):

* **failure_fraction**: failed attempts (error, timeout, worker_died) over all attempts;
* **stragglers**: the successful attempts longer than ``STRAGGLER_RATIO`` × their median, if they are at most
  ``MAX_STRAGGLER_FRACTION`` of them: their share is ``straggler_fraction``, their median over the others'
  ``straggler_factor``; otherwise none;
* **duration**: the others' log durations: a lognormal with their geometric mean as median and their standard
  deviation as sigma (constant with fewer than ``MIN_LOGNORMAL`` attempts or sigma 0);
* **cold_start_s**: the median ``init_s`` of the cold rows (cold attempts and pre-warms), else 0.

The ledger has no row counts or bytes, so ``per_row_s`` and ``bandwidth_bytes_per_s`` are not fitted (left out:
add them by hand). A kind with no successful attempt is left out (the config's ``default`` applies).

Example::

    profile = fit_profile(run_dir=Path("runs/ppo-cartpole-20261126"))
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


def fit_model(*, records: list[LedgerRecord]) -> DurationModel | None:
    """One kind's DurationModel from its ledger rows (module docstring); None without a successful attempt."""
    attempts = [r for r in records if r.outcome not in ("prewarm", "cancelled")]
    ok = np.array([r.duration_s for r in attempts if r.outcome == "ok" and r.duration_s > 0], dtype=np.float64)
    if ok.size == 0:
        return None
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
        failure_fraction=min(failures, 0.99))


def fit_profile(*, run_dir: Path) -> ProfileFile:
    """The profile of the run in ``run_dir`` (its ``ledger.jsonl``); ConfigError when it has none."""
    path = Path(run_dir) / "ledger.jsonl"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: no ledger.jsonl to fit a simulation profile from")
    records = Ledger.load(path=path)
    functions = {}
    for kind in KINDS:
        model = fit_model(records=[r for r in records if r.kind == kind])
        if model is not None:
            functions[kind] = model
    if not functions:
        raise ConfigError(f"{path}: no successful attempt to fit a simulation profile from")
    return ProfileFile(source=str(run_dir), functions=functions)


def write_profile(*, profile: ProfileFile, path: Path) -> Path:
    """Write ``profile`` as YAML (what ``simulation.profile`` loads)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# nimbus simulation profile (nimbus simulate fit); load it with simulation.profile\n" +
                    yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    return path
