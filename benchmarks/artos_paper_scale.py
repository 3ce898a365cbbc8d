"""ARTOS's claims at a cluster's scale, simulated (issue 30): async vs lockstep update time, and pre-warming.

Both run on ``runtime.backend: simulated`` (docs/simulated.md): the learning is real, time is simulated from a
profile fitted on real runs of the same config (``--take-profile``), with no capacity limit (the simulated cluster
has a CPU per actor, as ARTOS's worker nodes do) and no worker cap.

``--experiment lockstep`` (ARTOS §6.2, Fig. 13b: SAC's average update time −38 % against Ray's alternating loop).
Arms ``async`` and ``lockstep`` (``offpolicy.lockstep``: actors held while the learner updates, the learner
waiting for every fragment in flight: RLlib's and CleanRL's loop), per config, as benchmarks/offpolicy_update_time.py
does on real runs. Settings (``PAPER``): sac-pendulum with the paper's 4 actors and 512-step fragments ("transfer to
the head node every 512 steps"), batch 256 (the paper's 1024 would quadruple the gradients computed here for the
same replay ratio); dqn-cartpole and impala-cartpole at 32 actors (the shipped fragments). Back-pressure: each actor
may be one fragment ahead of what the learner consumed (``max_steps_ahead`` = actors × fragment rows). Update time:
simulated seconds from one learner result to the next per gradient step (the first round excluded), as the real
benchmark; the learner's share of a lockstep run's time bounds what overlap can hide. A run stops when its last
wave of fragments lands, and the time before its first learner result (the first wave, the learner's cold start)
is in no counted round: with W waves the update time covers W − 2 actor phases, so a run needs ``MIN_WAVES`` or
more (a warning says so; with 2 waves it measures the learner alone).

``--experiment prewarm`` (ARTOS §6.3, Table 5: PPO's average update time −7.7 % with pre-warming). PPO CartPole onpolicy
rounds with the paper's 16 actors (4 envs × 32 steps each: 2,048 rows a round), ``prewarm.mode`` none vs monitor
(window 5, λ 0.2). ARTOS checkpoints an actor after each sampling phase and shuts it down, so every round restores
its actors; here the keep-alive is ``--keep-alive-share`` (0.5) × the profile's learner median at the round's batch:
an idle actor is reclaimed during the learner's update, a pre-warmed one survives the update's jitter. Update time:
``round_s`` (actors invoked → learner finished, ARTOS's PPO definition), mean over the rounds after the monitor's
first window (``SKIP_ROUNDS``).

Per run: update time, gradient steps, the training return (``recent_return_mean``) at equal simulated time T (T the
smallest of the arms' median run times, per config), cold actor attempts, workers pre-warmed, cost. Per arm: IQM with
a 95 % stratified bootstrap interval over seeds (nimbus.analysis.stats.aggregate); per config: the ratio of the IQMs
and the paired per-seed ratios.

Run (the profiles' real runs must be taken alone: their durations are this machine's):
      python benchmarks/artos_paper_scale.py --take-profile              (real runs → benchmarks/results/artos_*.yaml)
      python benchmarks/artos_paper_scale.py --experiment lockstep --seeds 0 1 2 3 4
      python benchmarks/artos_paper_scale.py --experiment prewarm --seeds 0 1 2 3 4
      python benchmarks/artos_paper_scale.py --experiment lockstep --smoke   (tiny, the default duration model)
      python benchmarks/artos_paper_scale.py --experiment lockstep --merge a.json b.json --output all.json
"""

from __future__ import annotations

import argparse
import json
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _artos import QUIET, iqm_interval, recent_return, write_runs  # noqa: E402
from _common import interval_cell  # noqa: E402
from artos_profiles import PROFILES, learner_median_s, resident_learner, take_profiles  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
MIN_WAVES = 4       # lockstep: waves of every actor's fragment a run needs (below)
SKIP_ROUNDS = 6     # prewarm: round 0's start-up, then the monitor's first full window (5 rounds)
# config → (actors, env steps, overrides): the paper's settings where this machine can compute the learning
PAPER = {
    "sac-pendulum": (4, 8192, ("actors.fragment_steps=512",)),
    "dqn-cartpole": (32, 30000, ()),
    "impala-cartpole": (32, 60000, ()),
    "ppo-cartpole": (16, 2048 * 20, ("actors.restore_slots=true",)),   # ARTOS restores its actors (CRIU)
}
DEFAULT_CONFIGS = {"lockstep": ("sac-pendulum", "dqn-cartpole", "impala-cartpole"), "prewarm": ("ppo-cartpole",)}
# --smoke: config → (actors, env steps): two or more learner rounds each, on the default model
SMOKE = {"sac-pendulum": (2, 2048), "dqn-cartpole": (2, 2048), "impala-cartpole": (2, 2048),
         "ppo-cartpole": (4, 512 * 12)}
log = logging.getLogger("artos_paper_scale")


def fragment_rows(*, name: str, sets: tuple[str, ...]) -> int:
    """Rows of one actor fragment of ``name`` with ``sets`` applied."""
    config = load_config(path=REPO / "configs" / f"{name}.yaml", overrides=list(sets))
    return config.env.num_envs_per_actor * config.actors.fragment_steps


def arm_overrides(*, experiment: str, arm: str, name: str, args: argparse.Namespace) -> list[str]:
    """Every override of one arm's run: the paper's settings, the simulated backend, the arm, then ``--set``."""
    actors, steps, sets = PAPER[name]
    actors, steps = SMOKE[name] if args.smoke else (actors, steps)
    actors, steps = args.actors or actors, args.env_steps or steps
    profile = args.profile_dir / PROFILES[name] if args.profile_dir else None
    if experiment == "prewarm":   # ARTOS's learner is a resident process on the head node
        profile = resident_learner(profile=profile, out=args.root / f"{name}-resident-learner.yaml")
    base = [*QUIET, *sets, f"actors.scaling.num_actors={actors}", f"train.total_env_steps={steps}",
            "runtime.backend=simulated", "runtime.max_workers=null", "runtime.capacity_cpus=null"]
    if profile is not None:
        base.append(f"simulation.profile={profile}")
    if args.learner_speedup is not None:
        base.append(f"simulation.hardware={learner_hardware(speedup=args.learner_speedup, root=args.root)}")
    if experiment == "lockstep":
        ahead = actors * fragment_rows(name=name, sets=sets)
        if steps < MIN_WAVES * ahead:
            log.warning("%s: %d env steps are %.1f waves of %d actors' fragments: the update time (rounds after the "
                        "first, the run stopping when the last wave lands) misses most actor phases; use at least %d",
                        name, steps, steps / ahead, actors, MIN_WAVES * ahead)
        base += [f"offpolicy.max_steps_ahead={ahead}", f"offpolicy.lockstep={str(arm == 'lockstep').lower()}"]
    else:
        rows = actors * fragment_rows(name=name, sets=sets)
        keep_alive = args.keep_alive_share * learner_median_s(profile=profile, rows=rows)
        base += ["runtime.prewarm=false", f"runtime.keep_alive_s={keep_alive:.6g}",
                 f"prewarm.stability={args.stability}", f"prewarm.mode={'monitor' if arm == 'on' else 'none'}"]
    return [*base, *args.set]


def learner_hardware(*, speedup: float, root: Path) -> Path:
    """A hardware file (simulation.hardware) whose learner is ``speedup`` times the profiled machine's."""
    path = root / f"hardware-learner-x{speedup:g}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"description: learner {speedup:g}x the profiled CPU learner\nspeedup: {{learner: {speedup:g}}}\n")
    return path


def one_run(*, experiment: str, arm: str, name: str, seed: int, args: argparse.Namespace) -> dict:
    overrides = [*arm_overrides(experiment=experiment, arm=arm, name=name, args=args), f"seed={seed}",
                 f"output.root_dir={args.root / experiment}"]
    config = load_config(path=REPO / "configs" / f"{name}.yaml", overrides=overrides)
    started = time.perf_counter()
    result = train(config=config, run_dir=args.root / experiment / f"{name}-{arm}-s{seed}")
    rows = read_metrics(path=result.run_dir / "metrics.jsonl")
    if not rows:
        raise SystemExit(f"{name} {arm} seed {seed}: no learner round in {result.summary.env_steps} env steps "
                         "(the run stops at train.total_env_steps: give it more than one wave of fragments)")
    ledger = Ledger.load(path=result.run_dir / "ledger.jsonl")
    actors = [r for r in ledger if r.kind == "actor" and r.outcome == "ok"]
    counted = rows[SKIP_ROUNDS:] if experiment == "prewarm" and len(rows) > SKIP_ROUNDS else rows[1:] or rows
    steps = sum(float(r["extras"].get("gradient_steps", 1.0)) for r in counted)
    return {"experiment": experiment, "config": name, "arm": arm, "seed": seed, "rounds": len(rows),
            "env_steps": result.summary.env_steps, "gradient_steps": steps,
            "update_s_per_step": sum(r["round_s"] for r in counted) / max(steps, 1.0),
            "round_s_mean": float(np.mean([r["round_s"] for r in counted])),
            "learner_call_s": sum(float(r["extras"].get("learner_call_s", r.get("learning_s") or 0.0)) for r in rows),
            "wall_s": float(rows[-1]["wall_s"]), "cost_usd": float(result.summary.serverless_cost_usd),
            "curve": [(float(r["wall_s"]), recent_return(r)) for r in rows],
            "cold_actor_attempts": sum(r.cold for r in actors), "actor_attempts": len(actors),
            "prewarmed_workers": sum(r.outcome == "prewarm" and r.cold and r.kind == "actor" for r in ledger),
            "final_return": result.summary.final_return, "real_s": time.perf_counter() - started}


def return_at(*, run: dict, budget_s: float) -> float | None:
    """The run's training return at the last row ending by ``budget_s`` simulated seconds."""
    within = [value for wall_s, value in run["curve"] if wall_s <= budget_s and np.isfinite(value)]
    return within[-1] if within else None


def summarize(*, runs: list[dict], arms: tuple[str, str]) -> dict:
    """Per config and arm: IQM intervals; per config: the second arm over the first (IQMs, and per seed)."""
    out: dict = {}
    for name in dict.fromkeys(r["config"] for r in runs):
        mine = {arm: sorted((r for r in runs if r["config"] == name and r["arm"] == arm), key=lambda r: r["seed"])
                for arm in arms}
        budget = min(float(np.median([r["wall_s"] for r in rs])) for rs in mine.values() if rs)
        cell: dict = {"equal_time_budget_s": budget}
        for arm, rs in mine.items():
            cell[arm] = {key: iqm_interval([r[key] for r in rs]) for key in
                         ("update_s_per_step", "round_s_mean", "wall_s", "cost_usd", "final_return",
                          "cold_actor_attempts", "prewarmed_workers")}
            cell[arm]["return_at_equal_time"] = iqm_interval([return_at(run=r, budget_s=budget) for r in rs])
            cell[arm]["learner_share"] = float(np.mean([r["learner_call_s"] / r["wall_s"] for r in rs]))
        first, second = arms
        key = "update_s_per_step" if arms == ("lockstep", "async") else "round_s_mean"
        pairs = [b[key] / a[key] for a, b in zip(mine[first], mine[second]) if a["seed"] == b["seed"]]
        if cell[first][key] and cell[second][key]:
            cell["ratio"] = cell[second][key]["iqm"] / cell[first][key]["iqm"]
        cell["ratio_per_seed"] = pairs
        out[name] = cell
    return out


shown = interval_cell


def markdown(*, summary: dict, arms: tuple[str, str], experiment: str) -> str:
    key, unit = ("update_s_per_step", "ms/step") if experiment == "lockstep" else ("round_s_mean", "s/round")
    scale = 1e3 if experiment == "lockstep" else 1.0
    lines = [f"| config | arm | update time ({unit}) IQM [95 %] | return at T | T (s) | run time (s) | cost (USD) | "
             "cold actor attempts | pre-warmed | learner share |", "|" + " --- |" * 10]
    for name, cell in summary.items():
        for arm in arms:
            s = cell[arm]
            upd = s[key] and {k: (v * scale if isinstance(v, float) else v) for k, v in s[key].items()}
            lines.append(f"| {name} | {arm} | {shown(upd, '.3g')} | {shown(s['return_at_equal_time'], '.1f')} | "
                         f"{cell['equal_time_budget_s']:.1f} | {shown(s['wall_s'], '.1f')} | "
                         f"{shown(s['cost_usd'], '.4f')} | {shown(s['cold_actor_attempts'], '.0f')} | "
                         f"{shown(s['prewarmed_workers'], '.0f')} | "
                         f"{s['learner_share']:.0%} |")
    lines.append("")
    for name, cell in summary.items():
        per_seed = ", ".join(f"{r:.3f}" for r in cell["ratio_per_seed"])
        lines.append(f"{name}: {arms[1]} / {arms[0]} = {cell.get('ratio', float('nan')):.3f} (per seed {per_seed})")
    return "\n".join(lines)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", choices=("lockstep", "prewarm"), default="lockstep")
    parser.add_argument("--configs", nargs="+", help="default: DEFAULT_CONFIGS of the experiment")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--actors", type=int, help="actors for every config (default: PAPER's)")
    parser.add_argument("--env-steps", type=int, help="env steps for every config (default: PAPER's)")
    parser.add_argument("--profile-dir", type=Path, default=RESULTS, help="where --take-profile wrote the profiles; "
                                                                          "'none': the default duration model")
    parser.add_argument("--learner-speedup", type=float,
                        help="the simulated learner this many times the profiled one's speed (a hardware file: "
                             "simulation.hardware)")
    parser.add_argument("--keep-alive-share", type=float, default=0.5, help="prewarm: keep-alive / learner median")
    parser.add_argument("--stability", type=float, default=0.2, help="prewarm: the monitor's λ (prewarm.stability)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more overrides, every run")
    parser.add_argument("--take-profile", action="store_true", help="real local runs → the profiles (run alone)")
    parser.add_argument("--smoke", action="store_true", help="1 seed, tiny runs, the default duration model")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                        help="summarize the runs of earlier result files (runs split across invocations)")
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "artos-paper-scale")
    parser.add_argument("--output", type=Path, help="default benchmarks/results/artos_paper_scale_<experiment>.json")
    args = parser.parse_args()
    if str(args.profile_dir) == "none" or args.smoke:
        args.profile_dir = None
    args.configs = args.configs or list(DEFAULT_CONFIGS[args.experiment])
    unknown = [name for name in args.configs if name not in PAPER]
    missing = [PROFILES[name] for name in args.configs if name in PAPER and args.profile_dir is not None
               and not args.take_profile and not (args.profile_dir / PROFILES[name]).is_file()]
    if unknown:   # bad input: exit 2 naming it, before anything runs
        parser.error(f"--configs: {', '.join(unknown)} not one of {', '.join(PAPER)}")
    if missing:
        parser.error(f"--profile-dir: {args.profile_dir} has no {', '.join(missing)} (run --take-profile first)")
    return args


def main() -> None:
    args = parse()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    if args.take_profile:
        print(json.dumps(take_profiles(root=args.root / "profile-runs", out_dir=args.profile_dir or RESULTS), indent=1))
        return
    if args.smoke:   # tiny runs (SMOKE, 1 seed) on the default model: the script's path exercised
        args.seeds = args.seeds[:1]
    arms = ("lockstep", "async") if args.experiment == "lockstep" else ("off", "on")
    started, load_before = time.perf_counter(), os.getloadavg()
    runs = [run for path in args.merge or [] for run in json.loads(path.read_text())["runs"]]
    for seed in [] if args.merge else args.seeds:
        for name in args.configs:
            for arm in arms:
                run = one_run(experiment=args.experiment, arm=arm, name=name, seed=seed, args=args)
                log.info("%s %s seed %d: %.4g s/step, %.3f s/round, %.1f simulated s, return %s, real %.0f s",
                         name, arm, seed, run["update_s_per_step"], run["round_s_mean"], run["wall_s"],
                         run["final_return"], run["real_s"])
                runs.append(run)
    summary = summarize(runs=runs, arms=arms)
    output = args.output or RESULTS / f"artos_paper_scale_{args.experiment}.json"
    if not args.smoke:
        write_runs(path=output, runs=runs, summary=summary, started_s=started, load_before=load_before)
    print(markdown(summary=summary, arms=arms, experiment=args.experiment))


if __name__ == "__main__":
    main()
