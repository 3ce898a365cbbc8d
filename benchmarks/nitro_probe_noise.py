"""How noisy is Nitro's R for a given probe subset, and does averaging small probes help? (issue 15, item 5)

Trains PPO on Hopper-v5 (``configs/nitro-hopper.yaml``, one actor, ``--rounds`` rounds) so the policy is
past its initialisation, rolls the final policy out for ``--rows`` rows, and probes R on ``--draws``
independent subsets for each size, plus the mean of ``k`` probes of 256 rows (same total rows as one
probe of 256·k). Prints, per setting, R's median, its relative spread over the draws (IQR / median and
(max − min) / median), the error of the median against the full-batch R, and the probe time.

Run:  python benchmarks/nitro_probe_noise.py            (~1.5 min on 2 cores; prints JSON)
      python benchmarks/nitro_probe_noise.py --smoke    (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nimbus.config import load_config  # noqa: E402
from nimbus.nitro.probe import probe_policy  # noqa: E402
from nimbus.roles.probe import ProbeRequest  # noqa: E402
from nimbus.run.loop import train  # noqa: E402
from nitro_probe_sweep import rollout_batch  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def trained_run(*, rounds: int, root: Path) -> Path:
    config = load_config(path=REPO / "configs/nitro-hopper.yaml", overrides=[
        f"train.max_rounds={rounds}", "actors.scaling={kind: fixed, num_actors: 1}", f"output.root_dir={root}",
        "output.report=false", "output.status_line=false"])
    return train(config=config).run_dir


def draws(*, algo, model, batch, subset: int, count: int, iterations: int, average_of: int = 1) -> dict:
    ratios, seconds = [], []
    request = ProbeRequest(subset_size=subset, max_iterations=iterations, tolerance=1e-3)
    for draw in range(count):
        probes = [probe_policy(algo=algo, model=model, batch=batch, request=request, seed=1000 * draw + j)
                  for j in range(average_of)]
        ratios.append(float(np.mean([p["hessian_ratio"] for p in probes])))
        seconds.append(sum(p["probe_s"] for p in probes))
    median = statistics.median(ratios)
    q75, q25 = np.percentile(ratios, [75, 25])
    return {"subset_rows": subset, "average_of": average_of, "ratio_median": median,
            "iqr_over_median": float((q75 - q25) / abs(median)),
            "range_over_median": float((max(ratios) - min(ratios)) / abs(median)),
            "probe_s_median": statistics.median(seconds), "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--draws", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="2 rounds, 512 rows, 2 draws: checks the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.rows, args.draws = 2, 512, 2
    torch.set_num_threads(1)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        run_dir = trained_run(rounds=args.rounds, root=Path(root))
        algo, model, batch = rollout_batch(run_dir=run_dir, rows=args.rows)
    full = probe_policy(algo=algo, model=model, batch=batch, seed=0,
                        request=ProbeRequest(subset_size=args.rows, max_iterations=100, tolerance=1e-3))
    settings = [(s, 1) for s in (256, 512, 1024, 2048, args.rows) if s <= args.rows] + [(256, 4), (512, 4)]
    rows = [draws(algo=algo, model=model, batch=batch, subset=s, count=args.draws, iterations=args.iterations,
                  average_of=k) for s, k in settings]
    for row in rows:
        row["error_vs_full"] = abs(row["ratio_median"] - full["hessian_ratio"]) / abs(full["hessian_ratio"])
    print(json.dumps({"load_before": os.getloadavg(), "full_batch_ratio": full["hessian_ratio"],
                      "rows": rows, "total_s": time.perf_counter() - started}, indent=1))


if __name__ == "__main__":
    main()
