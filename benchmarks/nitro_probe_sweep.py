"""What the subset size (and the Lanczos iteration cap) does to Nitro's Hessian probe.

Takes a finished run (its config and final checkpoint: a trained policy), rolls that policy out
in-process through the real actor function (``--rows`` rows, env-major fragments), post-processes the
batch as the learner does, then times ``functions.probe.probe_policy`` for every subset size × iteration cap
(median of ``--repeats``, one torch thread as in a learner worker) and compares each R with the R of
the full batch at 100 iterations (the reference). ``share`` divides the probe time by a round time
(``--round-s``, e.g. the nitro arm's median round time from the ablation).

Run:  python benchmarks/nitro_probe_sweep.py RUN_DIR --round-s 0.6   (prints JSON)
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
from nimbus.config import parse_config
from nimbus.data.checkpoint import load_checkpoint
from nimbus.data.store import ShmStore
from nimbus.models.weights import load_model, weights_key
from nimbus.nitro.probe import probe_policy
from nimbus.onpolicy.actor import actor_function
from nimbus.policy.build import probe_spaces
from nimbus.roles.actor import ActorRequest
from nimbus.roles.probe import ProbeRequest
from nimbus.runtime.base import FunctionContext

log = logging.getLogger("nitro_probe_sweep")


@dataclass(frozen=True)
class SweepPoint:
    subset_size: int
    max_iterations: int
    probe_s: float            # median over repeats
    probe_min_s: float
    share: float | None       # probe_s / round_s
    ratio: float              # R on this subset (median over repeats: each repeat draws another subset)
    ratio_spread: float       # max − min of R over the repeats' subsets
    ratio_rel_error: float    # |R − R_full| / |R_full|, R_full = full batch, 100 iterations
    converged: bool


def rollout_batch(*, run_dir: Path, rows: int) -> tuple[object, torch.nn.Module, dict[str, torch.Tensor]]:
    """(algo, model with the run's final weights, post-processed batch of ``rows`` rows)."""
    state = load_checkpoint(path=run_dir)
    config = parse_config(data=state.config)
    algo = make_algorithm(config=ALGO_CONFIGS[config.algo.name].model_validate(config.algo.model_dump()))
    model = algo.make_model(spaces=probe_spaces(config=config))
    load_model(model=model, message=state.weights)
    store = ShmStore(owner=True)
    try:
        key = weights_key(policy="sweep", version=state.policy_version)
        store.put(key=key, message=state.weights)
        num_envs = max(1, rows // config.actors.fragment_steps)
        request = ActorRequest(env_id=config.env.id, env_kwargs=dict(config.env.kwargs), num_envs=num_envs,
                               fragment_steps=config.actors.fragment_steps, seed=config.seed + 777, actor_rank=0,
                               slot_seq=0, policy_version=state.policy_version, weights_key=key,
                               algo=config.algo.model_dump(mode="json"))
        context = FunctionContext(worker_id="sweep", function="actor", invocation_id="sweep", attempt=0)
        result = actor_function(context=context, request=request.to_message())
    finally:
        store.close()
    spec = algo.buffer_spec(spaces=probe_spaces(config=config))
    batch = {k: torch.as_tensor(np.ascontiguousarray(v)) for k, v in result.arrays.items() if k in spec}
    return algo, model, algo.postprocess(batch=batch)


def sweep(*, algo: object, model: torch.nn.Module, batch: dict[str, torch.Tensor], subset_sizes: list[int],
          iterations: list[int], repeats: int, round_s: float | None) -> list[SweepPoint]:
    full_rows = int(batch["rewards"].numel())
    reference = probe_policy(algo=algo, model=model, batch=batch,
                             request=ProbeRequest(subset_size=full_rows, max_iterations=100, tolerance=1e-3), seed=0)
    points = []
    for subset in subset_sizes:
        for cap in iterations:
            request = ProbeRequest(subset_size=subset, max_iterations=cap, tolerance=1e-3)
            runs = [probe_policy(algo=algo, model=model, batch=batch, request=request, seed=seed)
                    for seed in range(repeats)]      # each seed draws another subset and start vector
            points.append(_point(runs=runs, subset=min(subset, full_rows), cap=cap, round_s=round_s,
                                 reference=reference["hessian_ratio"]))
            log.info("subset %5d  iterations %3d  probe %.4f s  R %.3f", subset, cap, points[-1].probe_s,
                     points[-1].ratio)
    return points


def _point(*, runs: list[dict[str, float]], subset: int, cap: int, round_s: float | None,
           reference: float) -> SweepPoint:
    seconds = [r["probe_s"] for r in runs]
    ratios = [r["hessian_ratio"] for r in runs]
    ratio, probe_s = statistics.median(ratios), statistics.median(seconds)
    return SweepPoint(subset_size=subset, max_iterations=cap, probe_s=probe_s, probe_min_s=min(seconds),
                      share=probe_s / round_s if round_s else None, ratio=ratio,
                      ratio_spread=max(ratios) - min(ratios),
                      ratio_rel_error=abs(ratio - reference) / abs(reference) if math.isfinite(reference) else math.nan,
                      converged=all(r["hessian_converged"] == 1.0 for r in runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--subset-sizes", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048])
    parser.add_argument("--iterations", type=int, nargs="+", default=[30, 100])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--round-s", type=float, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    algo, model, batch = rollout_batch(run_dir=args.run_dir, rows=args.rows)
    points = sweep(algo=algo, model=model, batch=batch, subset_sizes=args.subset_sizes, iterations=args.iterations,
                   repeats=args.repeats, round_s=args.round_s)
    print(json.dumps([asdict(p) for p in points], indent=1))


if __name__ == "__main__":
    main()
