"""What benchmarks/artos_paper_scale.py, artos_shared_pool.py and artos_profiles.py share: the overrides that keep a
run quiet, a metrics row's training return, a figure's IQM interval over seeds, and the result file.

Example::

    from _artos import QUIET, iqm_interval, recent_return, write_runs   # beside the script

    config = load_config(path=..., overrides=[*QUIET, "seed=0"])
    write_runs(path=out, runs=runs, summary={"final_return": iqm_interval([recent_return(r[-1]) for r in rows])},
               started_s=started, load_before=load_before)
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from nimbus.analysis.stats import aggregate

# no evaluation, no target, no loggers, report or status line, no checkpoint but the last
QUIET = ("train.eval_episodes=0", "train.target_return=null", "output.loggers=[]", "output.report=false",
         "output.status_line=false", "train.checkpoint_every_rounds=100000")


def recent_return(row: dict) -> float:
    """A metrics row's training return (``extras.recent_return_mean``); NaN where the row has none."""
    value = row["extras"].get("recent_return_mean")
    return float("nan") if value is None else float(value)


def iqm_interval(values: list[float | None]) -> dict | None:
    """The IQM of the finite ``values`` with its 95 % stratified bootstrap interval (nimbus.analysis.stats.aggregate)
    and how many runs it counts; None where none is finite."""
    values = [v for v in values if v is not None and np.isfinite(v)]
    if not values:
        return None
    found = aggregate(scores_by_task=[np.asarray(values, dtype=np.float64)], statistic="iqm")
    return {"iqm": found.point, "low": found.low, "high": found.high, "runs": len(values)}


def write_runs(*, path: Path, runs: list[dict], summary: dict, started_s: float,
               load_before: tuple[float, float, float]) -> None:
    """The result file: the machine (CPUs, versions, the load averages before and now, the real seconds since
    ``started_s``, a ``time.perf_counter()``), the command, every run and the summary."""
    path.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                    "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
                    "real_s": time.perf_counter() - started_s},
        "command": " ".join(sys.argv), "runs": runs, "summary": summary}, indent=1))
