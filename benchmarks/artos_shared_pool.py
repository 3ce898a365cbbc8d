"""ARTOS's shared pool at a cluster's scale, simulated (issue 30): K workloads on one pool vs each on its own.

ARTOS §6.2 (Fig. 13a "multi", Fig. 14): twice the PPO workloads on the same CPUs cost 3.38 % more update time, with a
GPU pool of limited size time-multiplexed between their learners ("2x the workloads without more CPUs, 1.5x the
GPUs"); each workload holds 55 % of the CPU time and 46 % of the GPU time Ray's reservation holds.

Here on ``runtime.backend: simulated`` (docs/simulated.md, "Several workloads on one pool"): K PPO CartPole workloads
with the paper's 16 actors (4 envs x 32 steps: 2,048 rows a round), ``--rounds`` onpolicy rounds each, durations from
the profile benchmarks/artos_paper_scale.py ``--take-profile`` fitted
(benchmarks/results/artos_ppo-cartpole_profile.yaml), the learner resident (no cold start: ARTOS's learner processes
live on the head node). Arms:

* ``own``: each workload alone on a pool of its own: ``actors + 1`` CPUs (a CPU per actor and the learner's) and one
  device (``devices: {pool: on_demand, cpu_slots: 1}``), Ray-style: held for the workload's whole run. The K pools
  run side by side, so the makespan is the slowest workload's run.
* ``shared-gG`` (one per ``--shared-devices`` G): all K workloads on ONE pool of the same ``actors + 1`` CPUs and G
  devices (``nimbus train a.yaml b.yaml``: run/workloads.py, fair share by equal ``runtime.share_weight``).

Per run: the simulated makespan; the mean round time (``round_s``: actors invoked → learner finished, ARTOS's PPO
update time) over the workloads' rounds after the first; the serverless cost (cost/pricing.yaml) of all workloads;
the held CPU- and device-seconds (own: each pool's ``actors + 1`` CPUs and 1 device over its workload's run;
shared: the pool's CPUs and G devices over the makespan); their utilisation (attempts' busy CPU-seconds, the
ledger's lease seconds, over what was held); the training return (``recent_return_mean``, the mean over workloads)
at equal simulated time T (the shortest of the arms' median makespans) and at the end. Per arm: IQM with a 95 %
stratified bootstrap interval over seeds (nimbus.analysis.stats.aggregate). Workload i of seed s has seed
1000 s + i in every arm. Simulated figures do not depend on the machine's load.

Run:
      python benchmarks/artos_shared_pool.py --seeds 0 1 2 3 4                 (K = 2, G = 1 and 2, 20 rounds)
      python benchmarks/artos_shared_pool.py --workloads 4 --shared-devices 2 3 4 --seeds 0 1 2 3 4
      python benchmarks/artos_shared_pool.py --smoke          (1 seed, 4 actors, 3 rounds, the default model)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from nimbus.config import load_config
from nimbus.cost.ledger import Ledger
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.run.summary import TrainResult
from nimbus.run.workloads import train_workloads

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _artos import QUIET, iqm_interval, recent_return, write_runs  # noqa: E402
from _common import interval_cell  # noqa: E402
from artos_profiles import PROFILES, resident_learner  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CONFIG = "ppo-cartpole"
FIGURES = ("makespan_s", "round_s_mean", "cost_usd", "cpu_s_held", "device_s_held", "cpu_utilisation",
           "device_utilisation", "return_at_equal_time", "final_return")
log = logging.getLogger("artos_shared_pool")


def overrides(*, args: argparse.Namespace, devices: int, name: str, seed: int, root: Path) -> list[str]:
    """One workload's config: the paper's 16 actors, the simulated backend, ``devices`` learner devices."""
    return [*QUIET, f"name={name}", f"seed={seed}", f"actors.scaling.num_actors={args.actors}",
            f"train.max_rounds={args.rounds}", "train.total_env_steps=100000000", "actors.restore_slots=true",
            "runtime.backend=simulated", "runtime.max_workers=null", "runtime.prewarm=false",
            f"runtime.capacity_cpus={args.actors + 1}", "devices.pool=on_demand", "devices.kind=cpu",
            f"devices.cpu_slots={devices}", f"simulation.profile={args.profile}", f"output.root_dir={root}", *args.set]


def run_arm(*, arm: str, seed: int, args: argparse.Namespace) -> dict:
    """One arm of one seed: K workloads on their own pools (``own``) or on one (``shared-gG``)."""
    root = args.root / f"s{seed}" / arm
    names = [f"w{i}" for i in range(args.workloads)]
    devices = 1 if arm == "own" else int(arm.removeprefix("shared-g"))
    configs = [load_config(path=REPO / "configs" / f"{CONFIG}.yaml", overrides=overrides(
        args=args, devices=devices, name=name, seed=1000 * seed + i, root=root)) for i, name in enumerate(names)]
    started = time.perf_counter()
    if arm == "own":
        results = [train(config=config, run_dir=root / config.name) for config in configs]
        held_s = [r.summary.wall_s for r in results]            # each pool is held for its own workload's run
    else:
        results = train_workloads(configs=configs)
        held_s = [results[0].summary.wall_s]                     # one pool, held for the makespan
    return figures(arm=arm, seed=seed, results=results, held_s=held_s, devices=devices, args=args) | {
        "real_s": time.perf_counter() - started}


def figures(*, arm: str, seed: int, results: list[TrainResult], held_s: list[float], devices: int,
            args: argparse.Namespace) -> dict:
    rows = [read_metrics(path=r.run_dir / "metrics.jsonl") for r in results]
    ledger = [record for r in results for record in Ledger.load(path=r.run_dir / "ledger.jsonl")]
    attempts = [x for x in ledger if x.outcome != "prewarm"]
    busy_cpu_s = sum((x.end_at - x.start_at) * x.cpus for x in attempts)
    lease_s = sum(x.lease_end_at - x.lease_start_at for x in attempts if x.lease_start_at is not None)
    cpu_s_held = sum(held_s) * (args.actors + 1)
    device_s_held = sum(held_s) * devices
    return {"arm": arm, "seed": seed, "rounds": [len(own) for own in rows],
            "makespan_s": max(r.summary.wall_s for r in results),
            "round_s_mean": float(np.mean([row["round_s"] for own in rows for row in own[1:]])),
            "cost_usd": float(sum(r.summary.serverless_cost_usd for r in results)),
            "cpu_s_held": cpu_s_held, "device_s_held": device_s_held,
            "cpu_utilisation": busy_cpu_s / cpu_s_held, "device_utilisation": lease_s / device_s_held,
            "curves": [[(float(row["wall_s"]), recent_return(row)) for row in own] for own in rows],
            "final_return": float(np.nanmean([recent_return(own[-1]) for own in rows]))}


def return_at(*, run: dict, budget_s: float) -> float | None:
    """The workloads' mean training return at their last rows ending by ``budget_s`` simulated seconds."""
    found = []
    for curve in run["curves"]:
        within = [value for wall_s, value in curve if wall_s <= budget_s and np.isfinite(value)]
        if within:
            found.append(within[-1])
    return float(np.mean(found)) if len(found) == len(run["curves"]) else None


def summarize(*, runs: list[dict], arms: list[str]) -> dict:
    """Per arm: each figure's IQM interval over seeds; per shared arm: its ratios to ``own`` (IQMs and per seed)."""
    by_arm = {arm: sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"]) for arm in arms}
    budget = min(float(np.median([r["makespan_s"] for r in rs])) for rs in by_arm.values() if rs)
    for rs in by_arm.values():
        for run in rs:
            run["return_at_equal_time"] = return_at(run=run, budget_s=budget)
    out: dict = {"equal_time_budget_s": budget}
    for arm, rs in by_arm.items():
        out[arm] = {key: iqm_interval([r[key] for r in rs]) for key in FIGURES}
        if arm != "own" and by_arm.get("own"):
            own = {r["seed"]: r for r in by_arm["own"]}
            out[arm]["per_seed_over_own"] = {key: [r[key] / own[r["seed"]][key] for r in rs if r["seed"] in own]
                                             for key in ("makespan_s", "round_s_mean", "cpu_s_held", "device_s_held")}
    return out


def markdown(*, summary: dict, arms: list[str], workloads: int) -> str:
    lines = [f"| arm ({workloads} workloads) | makespan (s) | round time (s) | cost (USD) | CPU-s held | device-s held "
             f"| CPU util. | device util. | return at T = {summary['equal_time_budget_s']:.1f} s | final return |",
             "|" + " --- |" * 10]
    formats = (".2f", ".3f", ".4f", ".1f", ".1f", ".1%", ".1%", ".1f", ".1f")
    for arm in arms:
        cells = [interval_cell(summary[arm][key], fmt) for key, fmt in zip(FIGURES, formats)]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines.append("")
    for arm in arms:
        ratios = summary[arm].get("per_seed_over_own")
        if ratios:
            text = "; ".join(f"{key} {', '.join(f'{v:.3f}' for v in values)}" for key, values in ratios.items())
            lines.append(f"{arm} / own per seed: {text}")
    return "\n".join(lines)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--workloads", type=int, default=2, help="K workloads")
    parser.add_argument("--shared-devices", nargs="+", type=int, default=[1, 2], help="G devices of the shared pool")
    parser.add_argument("--actors", type=int, default=16, help="actors per workload (the paper's 16)")
    parser.add_argument("--rounds", type=int, default=20, help="onpolicy rounds per workload")
    parser.add_argument("--profile", type=Path, default=RESULTS / PROFILES[CONFIG],
                        help="the PPO profile (artos_paper_scale.py --take-profile); 'none': the default model")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more overrides, every run")
    parser.add_argument("--smoke", action="store_true", help="1 seed, 4 actors, 3 rounds, the default model")
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "artos-shared-pool")
    parser.add_argument("--output", type=Path, default=RESULTS / "artos_shared_pool.json")
    args = parser.parse_args()
    if args.smoke:
        args.seeds, args.actors, args.rounds, args.profile = args.seeds[:1], 4, 3, Path("none")
    if args.workloads < 1 or min(args.shared_devices) < 1:   # bad input: exit 2 naming it, before anything runs
        parser.error("--workloads and --shared-devices: at least 1")
    if str(args.profile) != "none" and not args.profile.is_file():
        parser.error(f"--profile: {args.profile} does not exist (benchmarks/artos_paper_scale.py --take-profile)")
    source = None if str(args.profile) == "none" else args.profile
    args.profile = resident_learner(profile=source, out=args.root / "ppo-cartpole-resident-learner.yaml")
    return args


def main() -> None:
    args = parse()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    arms = ["own", *[f"shared-g{g}" for g in args.shared_devices]]
    started, load_before = time.perf_counter(), os.getloadavg()
    runs = []
    for seed in args.seeds:
        for arm in arms:
            run = run_arm(arm=arm, seed=seed, args=args)
            log.info("seed %d %s: makespan %.2f s, round %.3f s, cost %.4f USD, CPU util %.1f %%, device util %.1f %%, "
                     "real %.0f s", seed, arm, run["makespan_s"], run["round_s_mean"], run["cost_usd"],
                     100 * run["cpu_utilisation"], 100 * run["device_utilisation"], run["real_s"])
            runs.append(run)
    summary = summarize(runs=runs, arms=arms)
    if not args.smoke:
        write_runs(path=args.output, runs=runs, summary=summary, started_s=started, load_before=load_before)
    print(markdown(summary=summary, arms=arms, workloads=args.workloads))


if __name__ == "__main__":
    main()
