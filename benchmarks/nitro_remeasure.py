"""Nitro's headline re-measured (issue 30): best return per dollar, Nitro against its baselines, IQM over seeds.

Arms (one base config, ``--config``, default configs/nitro-hopper.yaml; I_min/I_max from ``--min-actors`` /
``--max-actors``, default the config's):

    nitro-paper    actors.scaling: nitro, variant paper          (nitro/scaler.py, nitro/probe.py)
    nitro-authors  actors.scaling: nitro, variant authors_code   (nitro/scaler_authors.py, nitro/probe_authors.py)
    fixed-min      fixed(I_min)
    fixed-max      fixed(I_max)
    hydrozoa       doubling from I_min to I_max every ``--double-every`` rounds
    max            max(I_max)

Each arm runs ``--rounds`` rounds for each of ``--seeds`` (≥ 5 for the record), seed-major (a slow spell on the
machine hits every arm alike). Per run: the best training return (the highest per-round mean: the episodes that
ended in one round; --merge adds the best moving mean over at least 20 episodes, less lucky),
the run's serverless cost (ledger), **best return per dollar** (the headline: Nitro's claim is the best of all
arms), the final policy's evaluation return over ``--eval-episodes`` deterministic episodes from seed 12345, and
evaluation return per dollar. Per arm: the interquartile mean with a 95 % stratified bootstrap interval
(``nimbus.analysis.stats.aggregate``) of each; per Nitro arm and baseline: P(Nitro's run beats the baseline's)
on best return per dollar (``probability_of_improvement``), with its interval.

``--set`` applies to every arm, ``--arm-set ARM:KEY.PATH=VALUE`` to one arm.

**Paper scale** (``--paper-scale``; docs/benchmarks/nitro.md, "Paper scale, simulated"): I_min 8, I_max 64, 50
rounds, on the simulated backend (docs/simulated.md) with CartPole-v1 PPO actors of 1 env × 32 steps (the
``PAPER_SCALE_SET`` overrides of configs/ppo-cartpole.yaml). Durations come from a profile fitted from real runs of
that config (``--take-profile``: fixed 8, 16 and 32 actors on the local backend, fitted with
``nimbus.runtime.simulated_fit``), and each Nitro arm's learner pays its Hessian probe: the probe's real seconds
against batch rows, measured in real Nitro runs, are added to the learner's line in a per-variant profile.

Run:  python benchmarks/nitro_remeasure.py --seeds 0 1 2 3 4            (benchmarks/results/nitro_remeasure.json)
      python benchmarks/nitro_remeasure.py --take-profile                (real runs → PROFILE_DIR/*.yaml, once)
      python benchmarks/nitro_remeasure.py --paper-scale --seeds 0 1 2 3 4 \
          --output benchmarks/results/nitro_paper_scale.json
      python benchmarks/nitro_remeasure.py --smoke                       (CartPole, 2 rounds, 1 seed: about 2 minutes)
      python benchmarks/nitro_remeasure.py --merge a.json b.json --output all.json   (runs split across invocations)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from nimbus.analysis.stats import Interval, aggregate, probability_of_improvement
from nimbus.config import load_config
from nimbus.cost.ledger import Ledger
from nimbus.cost.pricing import load_pricing
from nimbus.report.metrics import read_metrics
from nimbus.roles.evaluate import evaluate_checkpoint
from nimbus.run.loop import train
from nimbus.runtime.simulated_fit import fit_profile, write_profile

REPO = Path(__file__).resolve().parents[1]
EVAL_SEED = 12345
# Paper scale (--paper-scale, --take-profile): the shipped CartPole PPO (rl-baselines3-zoo's tuned batch of 256 rows,
# 20 epochs: exactly I_min's round here) with Nitro's 1-env actors (paper §5.2) at 32 steps (paper: 256; CartPole
# learns from far fewer steps than Hopper, and 64 × 256 rows a round would saturate every arm at 500 in a few rounds
# and take hours here); a constant learning rate and clip (the shipped linear schedules decay with env steps, which
# differ per arm); no early stop at 475 (every arm runs every round).
PAPER_SCALE_CONFIG = "configs/ppo-cartpole.yaml"
FRAGMENT_STEPS = 32
PAPER_SCALE_SET = ("env.num_envs_per_actor=1", f"actors.fragment_steps={FRAGMENT_STEPS}",
                   "algo.lr_schedule=constant", "algo.clip_schedule=constant",
                   "train.target_return=null", "train.return_window=20", "train.total_env_steps=100000000",
                   "train.checkpoint_every_rounds=1000", "output.loggers=[]")
SIMULATED_SET = ("runtime.backend=simulated", "runtime.max_workers=null")
PROFILE_DIR = REPO / "benchmarks" / "results"
PROFILE = PROFILE_DIR / "nitro_cartpole_profile.yaml"           # fitted from the fixed real runs
PROBE_PROFILES = {"nitro-paper": PROFILE_DIR / "nitro_cartpole_profile_paper.yaml",        # + the probe's line
                  "nitro-authors": PROFILE_DIR / "nitro_cartpole_profile_authors.yaml"}
MOVING_EPISODES = 20             # --merge: the moving return over at least this many episodes (train.return_window)
PROFILE_ACTORS = (8, 16, 32)     # the fixed real runs: learner batches of 256, 512 and 1,024 rows
NITRO_ARMS = ("nitro-paper", "nitro-authors")
BASELINES = ("fixed-min", "fixed-max", "hydrozoa", "max")
METRICS = ("best_return_per_usd", "best_return", "cost_usd", "eval_return", "eval_return_per_usd", "env_steps",
           "mean_actors")
log = logging.getLogger("nitro_remeasure")


@dataclass(frozen=True)
class RunScore:
    arm: str
    seed: int
    run_dir: str
    best_return: float             # the highest per-round training return (the mean of the episodes that ended in it)
    cost_usd: float
    best_return_per_usd: float
    eval_return: float             # the final policy, deterministic, EVAL_SEED
    eval_return_per_usd: float
    env_steps: int
    wall_s: float
    mean_actors: float
    probe_share_median: float | None   # None for arms without a probe
    probe_s_median: float | None


def scaling_override(*, arm: str, min_actors: int, max_actors: int, double_every: int) -> str:
    """The ``actors.scaling`` section of ``arm`` as one ``--set`` override (flow-style YAML)."""
    sections = {
        "nitro-paper": f"{{kind: nitro, min_actors: {min_actors}, max_actors: {max_actors}, variant: paper}}",
        "nitro-authors": f"{{kind: nitro, min_actors: {min_actors}, max_actors: {max_actors}, variant: authors_code}}",
        "fixed-min": f"{{kind: fixed, num_actors: {min_actors}}}",
        "fixed-max": f"{{kind: fixed, num_actors: {max_actors}}}",
        "hydrozoa": (f"{{kind: hydrozoa, initial_actors: {min_actors}, max_actors: {max_actors}, "
                     f"double_every_rounds: {double_every}}}"),
        "max": f"{{kind: max, max_actors: {max_actors}}}",
    }
    return f"actors.scaling={sections[arm]}"


def hessian_overrides(*, arm: str, args: argparse.Namespace) -> list[str]:
    """Lanczos steps: the authors' 100 for authors_code (no convergence test: fewer steps change their R), the base
    config's for the paper probe (configs/nitro-hopper.yaml: 30, measured equal to 100 there) unless given."""
    steps = {"nitro-authors": args.authors_iterations, "nitro-paper": args.paper_iterations}.get(arm)
    return [] if steps is None else [f"actors.scaling.hessian.max_iterations={steps}"]


def run_arm(*, arm: str, seed: int, args: argparse.Namespace) -> RunScore:
    overrides = [f"seed={seed}", f"train.max_rounds={args.rounds}", f"output.root_dir={args.root}",
                 "output.status_line=false",
                 scaling_override(arm=arm, min_actors=args.min_actors, max_actors=args.max_actors,
                                  double_every=args.double_every),
                 *hessian_overrides(arm=arm, args=args), *args.set, *arm_sets(arm=arm, args=args)]
    config = load_config(path=REPO / args.config, overrides=overrides)
    result = train(config=config, run_dir=args.root / f"{arm}-s{seed}")
    rows, summary = result.rows, result.summary
    returns = [r.return_mean for r in rows if r.return_mean is not None]
    best, cost = (max(returns) if returns else 0.0), summary.serverless_cost_usd
    evaluated = evaluate_checkpoint(path=result.run_dir, episodes=args.eval_episodes, seed=EVAL_SEED, explore=False)
    # Simulated: a function's *_s extras are its whole simulated duration (docs/simulated.md), so probe_s is the
    # learner's and its share says nothing about the probe: left out.
    real = config.runtime.backend != "simulated"
    shares = [r.extras["probe_share"] for r in rows if "probe_share" in r.extras and real]
    probe_s = [r.extras["probe_s"] for r in rows if "probe_s" in r.extras and real]
    return RunScore(arm=arm, seed=seed, run_dir=str(result.run_dir), best_return=float(best), cost_usd=cost,
                    best_return_per_usd=best / cost, eval_return=evaluated.mean_return,
                    eval_return_per_usd=evaluated.mean_return / cost, env_steps=summary.env_steps,
                    wall_s=summary.wall_s, mean_actors=float(np.mean([r.num_actors for r in rows])),
                    probe_share_median=float(np.median(shares)) if shares else None,
                    probe_s_median=float(np.median(probe_s)) if probe_s else None)


def arm_sets(*, arm: str, args: argparse.Namespace) -> list[str]:
    """The ``--arm-set ARM:KEY=VALUE`` overrides of ``arm`` (applied after ``--set``)."""
    return [item.split(":", 1)[1] for item in args.arm_set if item.split(":", 1)[0] == arm]


def interval(values: list[float]) -> dict[str, float | None]:
    """IQM over seeds with its 95 % bootstrap interval (one task: this env)."""
    result: Interval = aggregate(scores_by_task=[np.asarray(values, dtype=np.float64)], statistic="iqm")
    return {"iqm": result.point, "low": result.low, "high": result.high, "n": len(values)}


def summarise(*, runs: list[RunScore]) -> dict[str, dict]:
    arms = list(dict.fromkeys(r.arm for r in runs))
    table = {arm: {metric: interval([getattr(r, metric) for r in runs if r.arm == arm]) for metric in METRICS}
             for arm in arms}
    for nitro in (a for a in NITRO_ARMS if a in arms):
        mine = np.asarray([r.best_return_per_usd for r in runs if r.arm == nitro])
        table[nitro]["p_beats"] = {
            base: asdict(probability_of_improvement(
                x_by_task=[mine], y_by_task=[np.asarray([r.best_return_per_usd for r in runs if r.arm == base])]))
            for base in arms if base != nitro}
    return table


def markdown(*, table: dict[str, dict]) -> str:
    def cell(entry: dict, fmt: str) -> str:
        low, high = entry["low"], entry["high"]
        bounds = "" if low is None else f" [{fmt.format(low)}, {fmt.format(high)}]"
        return f"{fmt.format(entry['iqm'])}{bounds}"

    lines = ["| arm | best return per USD | best return | cost (USD) | eval return | env steps | mean actors |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for arm, e in table.items():
        lines.append(f"| {arm} | {cell(e['best_return_per_usd'], '{:,.0f}')} | {cell(e['best_return'], '{:.0f}')} | "
                     f"{cell(e['cost_usd'], '{:.4f}')} | {cell(e['eval_return'], '{:.0f}')} | "
                     f"{e['env_steps']['iqm']:,.0f} | {e['mean_actors']['iqm']:.2f} |")
    lines.append("")
    for arm, e in table.items():
        for base, p in e.get("p_beats", {}).items():
            bounds = "" if p["low"] is None else f" [{p['low']:.2f}, {p['high']:.2f}]"
            lines.append(f"- P({arm} beats {base} on best return per USD) = {p['point']:.2f}{bounds}")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/nitro-hopper.yaml", help="base config, relative to the repo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--arms", nargs="+", default=[*NITRO_ARMS, *BASELINES], choices=[*NITRO_ARMS, *BASELINES])
    parser.add_argument("--min-actors", type=int, default=None, help="I_min (default: the base config's)")
    parser.add_argument("--max-actors", type=int, default=None, help="I_max (default: the base config's)")
    parser.add_argument("--double-every", type=int, default=10, help="hydrozoa's rounds between doublings")
    parser.add_argument("--authors-iterations", type=int, default=100, help="Lanczos steps of the authors' probe")
    parser.add_argument("--paper-iterations", type=int, default=None,
                        help="Lanczos steps of the paper probe (default: the base config's)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="CartPole, every arm, 1 seed, 2 rounds, I 1..2")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="config override for every arm (e.g. runtime.backend=simulated)")
    parser.add_argument("--arm-set", action="append", default=[], metavar="ARM:KEY.PATH=VALUE",
                        help="config override for one arm (after --set)")
    parser.add_argument("--paper-scale", action="store_true",
                        help="I 8..64, simulated, CartPole 1 env × 32 steps, the fitted profiles (module docstring)")
    parser.add_argument("--take-profile", action="store_true",
                        help="real local runs of the paper-scale config, fitted into the profiles it loads")
    parser.add_argument("--profile-rounds", type=int, default=20, help="rounds of each --take-profile run")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, help="one table from these results' runs")
    parser.add_argument("--target", type=float, default=475.0,
                        help="--merge: the training return whose first reach is costed (CartPole-v1: 475)")
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "nitro-remeasure")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "nitro_remeasure.json")
    args = parser.parse_args()
    if args.smoke:
        args.config, args.seeds, args.rounds, args.eval_episodes = "configs/ppo-cartpole.yaml", [0], 2, 2
        args.min_actors, args.max_actors, args.double_every = 1, 2, 1
        args.authors_iterations, args.paper_iterations = 20, 20
        args.set = ["algo.minibatch_size=64", *args.set]          # one actor's round: 4 envs × 32 steps
    if args.paper_scale:
        args.config = PAPER_SCALE_CONFIG
        args.min_actors = 8 if args.min_actors is None else args.min_actors
        args.max_actors = 64 if args.max_actors is None else args.max_actors
        args.set = [*PAPER_SCALE_SET, *SIMULATED_SET, f"simulation.profile={PROFILE}", *args.set]
        args.arm_set = [*(f"{arm}:simulation.profile={path}" for arm, path in PROBE_PROFILES.items()), *args.arm_set]
    return args


def fill_actor_range(args: argparse.Namespace) -> None:
    """I_min/I_max default to the base config's nitro section (or its fixed count for both)."""
    scaling = load_config(path=REPO / args.config).actors.scaling
    default_min = getattr(scaling, "min_actors", getattr(scaling, "num_actors", 1))
    default_max = getattr(scaling, "max_actors", getattr(scaling, "num_actors", default_min))
    args.min_actors = default_min if args.min_actors is None else args.min_actors
    args.max_actors = default_max if args.max_actors is None else args.max_actors


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.merge:
        merge(paths=args.merge, output=args.output, target=args.target)
        return
    if args.take_profile:
        take_profile(args=args)
        return
    fill_actor_range(args)
    started, runs = time.perf_counter(), []
    for seed in args.seeds:
        for arm in args.arms:
            runs.append(run_arm(arm=arm, seed=seed, args=args))
            log.info("%s seed %d: best return %.1f, $%.5f, %.0f per USD, %.0f s", arm, seed, runs[-1].best_return,
                     runs[-1].cost_usd, runs[-1].best_return_per_usd, runs[-1].wall_s)
            partial = args.output.with_suffix(".partial.json")    # the runs so far (--merge reads it)
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps({"command": " ".join(sys.argv), "runs": [asdict(r) for r in runs]}, indent=1))
    table = summarise(runs=runs)
    result = {"command": " ".join(sys.argv), "config": args.config, "actors": [args.min_actors, args.max_actors],
              "seeds": args.seeds, "rounds": args.rounds, "total_s": time.perf_counter() - started,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                          "load_avg_at_end": os.getloadavg()},
              "arms": table, "runs": [asdict(r) for r in runs]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    print(markdown(table=table))
    print(f"\n{len(runs)} runs in {result['total_s'] / 60:.1f} min; results {args.output}")


def merge(*, paths: list[Path], output: Path, target: float) -> None:
    """The runs of several result files (arms or seeds split across invocations) in one table, and from each run's
    directory (when still there) its cost split and the cost to reach ``target`` (``from_run_dir``)."""
    runs = [RunScore(**run) for path in paths for run in json.loads(path.read_text())["runs"]]
    table = summarise(runs=runs)
    extra = {f"{r.arm}-s{r.seed}": from_run_dir(run_dir=Path(r.run_dir), target=target) for r in runs
             if (Path(r.run_dir) / "ledger.jsonl").is_file()}
    for arm in table:
        mine = [extra[f"{r.arm}-s{r.seed}"] for r in runs if r.arm == arm and f"{r.arm}-s{r.seed}" in extra]
        table[arm]["split_usd_mean"] = {key: float(np.mean([m["split_usd"][key] for m in mine]))
                                        for key in mine[0]["split_usd"]} if mine else {}
        moving = [(extra[f"{r.arm}-s{r.seed}"]["best_moving_return"] or 0.0, r.cost_usd) for r in runs
                  if r.arm == arm and f"{r.arm}-s{r.seed}" in extra]
        if moving:
            table[arm]["best_moving_return"] = interval([m for m, _ in moving])
            table[arm]["best_moving_return_per_usd"] = interval([m / cost for m, cost in moving])
            # the same runs priced without the provisioned actors' idle time (pay-per-use actors; a re-pricing of
            # these ledgers, not a run without pre-warming, which would add cold starts)
            table[arm]["best_return_per_usd_no_idle_actors"] = interval([
                r.best_return / (r.cost_usd - extra[f"{r.arm}-s{r.seed}"]["split_usd"]["actor_provisioned_idle"])
                for r in runs if r.arm == arm and f"{r.arm}-s{r.seed}" in extra])
        reached = [m["cost_to_target_usd"] for m in mine if m["cost_to_target_usd"] is not None]
        table[arm]["to_target"] = {"target": target, "reached": len(reached), "of": len(mine),
                                   "cost_usd": interval(reached) if reached else None}
    output.parent.mkdir(parents=True, exist_ok=True)
    sources = [{key: value for key, value in json.loads(path.read_text()).items() if key not in ("arms", "runs")}
               | {"path": str(path)} for path in paths]     # each invocation's command, total_s, machine and load
    output.write_text(json.dumps({"merged": [str(p) for p in paths], "sources": sources, "arms": table,
                                  "per_run": extra, "runs": [asdict(r) for r in runs]}, indent=1))
    print(markdown(table=table))


def from_run_dir(*, run_dir: Path, target: float) -> dict:
    """A run's bill split (learner; actor runs; actor provisioned idle time; cold starts) priced by
    cost/pricing.yaml, and the cost and round at which its moving training return first reached ``target``."""
    pricing, split = load_pricing(), {"learner": 0.0, "actor_run": 0.0, "actor_provisioned_idle": 0.0,
                                      "cold_starts": 0.0}
    for record in Ledger.load(path=run_dir / "ledger.jsonl"):
        key = "learner" if record.kind != "actor" else (
            "actor_run" if record.outcome != "prewarm" else "cold_starts" if record.cold else "actor_provisioned_idle")
        split["cold_starts" if record.outcome == "prewarm" and record.cold else key] += pricing.cost_usd(record=record)
    rows = read_metrics(path=run_dir / "metrics.jsonl")
    moving = moving_returns(rows=rows, episodes=MOVING_EPISODES)
    hit = next((row for row, value in zip(rows, moving) if value is not None and value >= target), None)
    best = max((v for v in moving if v is not None), default=None)
    return {"split_usd": split, "best_moving_return": best, "cost_to_target_usd": hit["cost_usd"] if hit else None,
            "round_to_target": hit["round"] if hit else None, "simulated_s": rows[-1]["wall_s"]}


def moving_returns(*, rows: list[dict], episodes: int) -> list[float | None]:
    """Per round, the mean return of the episodes of the fewest trailing rounds that hold at least ``episodes``
    finished episodes (each round's mean weighted by its episodes); None until that many have finished."""
    counts = np.diff([0] + [row["episodes"] for row in rows])
    out: list[float | None] = []
    for index in range(len(rows)):
        total, weighted, back = 0, 0.0, index
        while back >= 0 and total < episodes:
            if counts[back] and rows[back]["return_mean"] is not None:
                total, weighted = total + counts[back], weighted + counts[back] * rows[back]["return_mean"]
            back -= 1
        out.append(weighted / total if total >= episodes else None)
    return out


def take_profile(*, args: argparse.Namespace) -> None:
    """Real local runs of the paper-scale config: fixed 8, 16, 32 actors fitted into PROFILE; a real run per Nitro
    variant (I 8..32) gives its probe's seconds against batch rows (``probe_line``), added to the learner's line in
    its profile. Runs already under ``--root`` (a summary.json) are reused, not run again."""
    load_before, started = os.getloadavg(), time.perf_counter()
    base = [*PAPER_SCALE_SET, f"seed={args.seeds[0]}", f"train.max_rounds={args.profile_rounds}",
            f"output.root_dir={args.root}", "output.status_line=false"]
    fixed_dirs = []
    for actors in PROFILE_ACTORS:
        section = scaling_override(arm="fixed-min", min_actors=actors, max_actors=actors, double_every=1)
        fixed_dirs.append(real_run(name=f"profile-fixed{actors}", overrides=[*base, section]))
    profile = fit_profile(run_dirs=fixed_dirs)
    write_profile(profile=profile, path=PROFILE)
    probes = {}
    for arm, path in PROBE_PROFILES.items():
        section = scaling_override(arm=arm, min_actors=PROFILE_ACTORS[0], max_actors=PROFILE_ACTORS[-1],
                                   double_every=1)
        run_dir = real_run(name=f"profile-{arm}", overrides=[*base, section, *hessian_overrides(arm=arm, args=args)])
        probes[arm] = probe_line(run_dir=run_dir, learner=profile.functions["learner"])
        learner = profile.functions["learner"]
        with_probe = learner.model_copy(update={"median_s": learner.median_s + probes[arm]["intercept_s"],
                                                "per_row_s": learner.per_row_s + probes[arm]["per_row_s"]})
        write_profile(profile=profile.model_copy(update={
            "functions": {**profile.functions, "learner": with_probe},
            "source": f"{profile.source}; probe line from {run_dir}"}), path=path)
    record = {"command": " ".join(sys.argv), "fixed_runs": [str(d) for d in fixed_dirs], "probes": probes,
              "profile": str(PROFILE), "real_s": time.perf_counter() - started,
              "load_avg_before": load_before, "load_avg_after": os.getloadavg(), "cpus": os.cpu_count()}
    (PROFILE_DIR / "nitro_cartpole_profile.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))


def probe_line(*, run_dir: Path, learner) -> dict:
    """The probe's seconds against batch rows in a real Nitro run, corrected for the load it ran at: each round's
    learner time less its probe (the update) over the fitted profile's update time at those rows gives a slowdown;
    the probe's line is divided by its median (the profile's runs and this one need not meet the same load)."""
    rows_per_round = [(m["num_actors"] * FRAGMENT_STEPS, m["extras"]["probe_s"])
                      for m in read_metrics(path=run_dir / "metrics.jsonl") if "probe_s" in m["extras"]]
    learners = [r.duration_s for r in Ledger.load(path=run_dir / "ledger.jsonl")
                if r.kind == "learner" and r.outcome == "ok"]
    slowdown = float(np.median([(total - probe_s) / (learner.median_s + learner.per_row_s * rows)
                                for (rows, probe_s), total in zip(rows_per_round, learners)]))
    rows = np.array([n for n, _ in rows_per_round], dtype=np.float64)
    seconds = np.array([s for _, s in rows_per_round]) / slowdown
    slope, intercept = np.polyfit(rows, seconds, 1) if len(set(rows)) > 1 else (0.0, float(np.median(seconds)))
    return {"run_dir": str(run_dir), "probes": len(rows), "slowdown": slowdown,
            "intercept_s": max(0.0, float(intercept)), "per_row_s": max(0.0, float(slope)),
            "rows_range": [float(rows.min()), float(rows.max())],
            "probe_s_median_raw": float(np.median(seconds * slowdown))}


def real_run(*, name: str, overrides: list[str]) -> Path:
    """One real run of the paper-scale config on the shipped (local) backend; an earlier one is reused."""
    config = load_config(path=REPO / PAPER_SCALE_CONFIG, overrides=overrides)
    run_dir = Path(config.output.root_dir) / name
    if (run_dir / "summary.json").is_file():
        return run_dir
    result = train(config=config, run_dir=run_dir)
    log.info("%s: %d rounds, %.1f s, $%.5f", name, len(result.rows), result.summary.wall_s,
             result.summary.serverless_cost_usd)
    return result.run_dir


if __name__ == "__main__":
    main()
