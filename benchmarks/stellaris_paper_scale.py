"""Stellaris's headline claims at the paper's scale, simulated (issue 30): 16 learners, reward at equal time and cost.

The arms of benchmarks/stellaris_ablation.py (plain PPO, sync, softsync, SSP, async, stellaris, stellaris without
truncation) on ``runtime.backend: simulated`` (docs/simulated.md): the learning is real, time and cost are simulated
from a profile fitted on a real run of the same config (``nimbus simulate fit``). Scale (the paper's §VIII-A/B:
16 learners = 4 V100s × 4 learner functions; PPO's batch of 4096; 50 rounds):

    16 learners in flight (``--learners``); ``--actors`` × 4 envs × 64 steps a round (16: 4096 rows, the paper's
    batch; the record uses 8: 2048 rows), cut into slices of 128 rows (``algo.minibatch_size``, the profile's learner
    batch), 4 epochs: 4 × rows / 128 gradients a round; ``--rounds`` rounds (the paper: 50; the record: 15).

Stragglers: the simulation's tail model on the gradient learner (``straggler_fraction`` × ``straggler_factor``) over
the lognormal spread, both as fitted from the real run (there: 10 % of learner calls 3.9× slower, from 4 learners
sharing 2 cores); ``--tail-fraction`` / ``--tail-factor`` replace the fitted tail (the profile used is written to
``--root``). ``stellaris.stragglers`` (a benchmark aid that sleeps in real time) is off: a simulated function's
duration is drawn, its real time does not count, so the aid would only slow the benchmark. The paper states no
straggler setting.

Cost: the paper's model (§VIII-A): a gradient learner is a quarter of a p3.2xlarge (``learner.function.gpus=0.25``,
cost/pricing.yaml; the parameter function keeps its 2048 MB CPU spec, Lambda-priced), actors Lambda-priced CPU
functions; no pre-warming (``runtime.prewarm=false``: the paper excludes pre-warm and keep-alive cost), no worker cap.
Each run records both bills (docs/artos.md, "Two bills"): billed (each new worker's cold start included, as nimbus's
ledger bills it) and without cold starts and provisioned idle time (``serverless_cost_excl_cold_usd``, the paper's
exclusion), the run's total and its cost to the target with each, and the cost to the highest training return that every
run of stellaris and ppo reached (so the cost to a target is measurable when an arm misses ``--target``).

Per run (stellaris_ablation.Run): final evaluation (equal rounds, so equal env steps), the training-return curve
against simulated time and cost, time and cost to ``--target``, tail variance, staleness. Reward at equal time:
each run's training return (``train.return_window`` episodes) at the last round ending by T, T the smallest of the
arms' median simulated run times; at equal cost likewise with C. Each as IQM with a 95 % stratified bootstrap
interval (nimbus.analysis.stats.aggregate). Then the paper's claims (2.2× reward, −41 % cost, lower variance with
truncation), each as measured.

Run:  nimbus train configs/stellaris-cartpole.yaml --set train.total_env_steps=10240 --set stellaris.learners=4 \\
        --set train.eval_episodes=0 --run-dir runs/stellaris-profile-real        (real, local workers: the profile)
      nimbus simulate fit runs/stellaris-profile-real --output benchmarks/results/stellaris_paper_scale_profile.yaml
      python benchmarks/stellaris_paper_scale.py --profile benchmarks/results/stellaris_paper_scale_profile.yaml \
        --actors 8 --rounds 15                                     (the record: 7 arms x 5 seeds)
      python benchmarks/stellaris_paper_scale.py --profile P --actors 8 --rounds 15 --arms ppo --target 100 \
        --output ppo.json && python benchmarks/stellaris_paper_scale.py --profile P --actors 8 --rounds 15 \
        --arms stellaris --set stellaris.decay=0.96 --target 100 --output st.json && \
        python benchmarks/stellaris_paper_scale.py --merge ppo.json st.json --target 100 --output both.json
                                                 (the cost claim with and without cold starts: 2 arms x 5 seeds)
      python benchmarks/stellaris_paper_scale.py --profile P --smoke       (2 arms, 1 seed, 2 rounds)
      python benchmarks/stellaris_paper_scale.py --merge a.json b.json --output all.json
      python benchmarks/stellaris_paper_scale.py --merge a.json --collect ROOT/ppo-s1 ROOT/sync-s1 ...
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nimbus.config.simulation import load_profile  # noqa: E402
from nimbus.report.metrics import read_metrics  # noqa: E402
from nimbus.runtime.simulated_fit import write_profile  # noqa: E402
from stellaris_ablation import ARMS, BASELINES, Run, _interval, add_shared_arguments, cell, collected, run_arm, table  # noqa: E402
from stellaris_aggregator import measured as aggregator_figures  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PAPER_ARMS = ("ppo", "sync", "softsync", "ssp", "async", "stellaris", "stellaris-no-truncation")
# the cost claim's arms: the common target is the highest return all their runs reached
COST_ARMS = ("stellaris", "ppo")
log = logging.getLogger("stellaris_paper_scale")


@dataclass(frozen=True)
class PaperRun(Run):
    """A Run with the bill without cold starts and provisioned idle time (the paper's, cost/pricing.py): None in
    runs recorded before it existed."""

    cost_excl_cold_usd: float | None = None
    cost_excl_cold_to_target_usd: float | None = None
    curve_excl_cold: list[float] = field(default_factory=list)   # per round (as ``curve``): that bill so far
    # does the aggregator keep up (benchmarks/stellaris_aggregator.py): Σ parameter durations / simulated wall (its
    # busy fraction: one runs at a time), Σ gradient-learner durations / wall (learners computing at once), and
    # the staleness histogram of the steady rounds (round ≥ 2); None in runs recorded before
    parameter_busy: float | None = None
    learners_computing: float | None = None
    staleness_counts_steady: dict[str, float] = field(default_factory=dict)


def with_excl_cold(*, run: Run, run_dir: Path) -> PaperRun:
    """``run`` with its bill without cold starts, read off its run directory (summary.json, metrics.jsonl)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    curve = [float(row.get("extras", {}).get("cost_excl_cold_usd", float("nan")))
             for row in read_metrics(path=run_dir / "metrics.jsonl")]
    system = aggregator_figures(setting="paper16", arm=run.arm, seed=run.seed, run_dir=run_dir,
                                wall_s=summary["wall_s"], real_s=0.0)
    return PaperRun(**{f.name: getattr(run, f.name) for f in fields(Run)},
                    cost_excl_cold_usd=summary.get("serverless_cost_excl_cold_usd"), curve_excl_cold=curve,
                    parameter_busy=system.parameter_share, learners_computing=system.learners_computing,
                    staleness_counts_steady=system.staleness_counts_steady)


def tailed_profile(*, profile: Path, fraction: float | None, factor: float | None, out: Path) -> Path:
    """``profile`` with the gradient learner's straggler tail set where given (None: as fitted; the other kinds as
    fitted), written to ``out``."""
    loaded = load_profile(path=profile)
    if "gradient_learner" not in loaded.functions:
        raise ValueError(f"{profile}: functions.gradient_learner: missing (fit the profile from a stellaris run)")
    fitted = loaded.functions["gradient_learner"]
    fraction = fitted.straggler_fraction if fraction is None else fraction
    factor = fitted.straggler_factor if factor is None else factor
    learner = fitted.model_copy(update={"straggler_fraction": fraction, "straggler_factor": factor})
    return write_profile(profile=loaded.model_copy(
        update={"functions": {**loaded.functions, "gradient_learner": learner},
                "source": f"{loaded.source}; gradient_learner tail {fraction} x {factor}"}), path=out)


def simulated(*, profile: Path, actors: int, sets: list[str]) -> tuple[str, ...]:
    """The keys every arm shares: the simulated backend at the paper's cost model, then ``--set``s."""
    return ("runtime.backend=simulated", f"simulation.profile={profile}", "runtime.max_workers=null",
            "runtime.prewarm=false", "learner.function.gpus=0.25", f"actors.scaling.num_actors={actors}", *sets)


def at_budget(*, runs: list[Run], axis: int) -> tuple[float, dict[str, list[float]]]:
    """The budget (the smallest of the arms' median final simulated time, axis 0, or cost, axis 1) and, per arm,
    each run's training return at the last round ending within it."""
    arms = dict.fromkeys(r.arm for r in runs)
    budget = min(float(np.median([r.curve[-1][axis] for r in runs if r.arm == arm])) for arm in arms)
    found: dict[str, list[float]] = {arm: [] for arm in arms}
    for run in runs:
        within = [point[2] for point in run.curve if point[axis] <= budget and np.isfinite(point[2])]
        if within:
            found[run.arm].append(float(within[-1]))
    return budget, found


def retargeted(*, run: Run, target: float) -> Run:
    """``run`` with its time and cost to ``target`` read off its curve (the first round whose training return
    reaches it), so merged runs can be compared at another target; a PaperRun's cost without cold starts too."""
    first = next((i for i, point in enumerate(run.curve) if np.isfinite(point[2]) and point[2] >= target), None)
    time_s, cost = (run.curve[first][0], run.curve[first][1]) if first is not None else (None, None)
    updated = replace(run, time_to_target_s=time_s, cost_to_target_usd=cost)
    if not isinstance(run, PaperRun):
        return updated
    excl = run.curve_excl_cold[first] if first is not None and first < len(run.curve_excl_cold) else None
    return replace(updated, cost_excl_cold_to_target_usd=excl if excl is not None and np.isfinite(excl) else None)


def common_target(*, runs: list[Run]) -> float | None:
    """The highest training return every run of the cost arms (COST_ARMS) reached, rounded down; None without
    runs of both."""
    mine = [r for r in runs if r.arm in COST_ARMS]
    if {r.arm for r in mine} != set(COST_ARMS):
        return None
    best = [max((p[2] for p in r.curve if np.isfinite(p[2])), default=float("nan")) for r in mine]
    return float(np.floor(min(best))) if all(np.isfinite(best)) else None


def _cost_intervals(*, runs: list[Run], prefix: str) -> dict[str, dict]:
    """Per arm: the billed and without-cold-starts cost to the target the runs were retargeted to, over the runs
    that reached it, as ``<prefix>`` and ``<prefix>_excl_cold`` keys; the totals without cold starts."""
    out: dict[str, dict] = {}
    for arm in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == arm]
        excl = [r.cost_excl_cold_to_target_usd for r in mine if getattr(r, "cost_excl_cold_to_target_usd", None)
                is not None]
        out[arm] = {f"{prefix}_usd": _interval([r.cost_to_target_usd for r in mine if r.cost_to_target_usd
                                                is not None]),
                    f"{prefix}_excl_cold_usd": _interval(excl),
                    "cost_excl_cold_usd": _interval([r.cost_excl_cold_usd for r in mine
                                                     if getattr(r, "cost_excl_cold_usd", None) is not None])}
    return out


def summarize(*, runs: list[Run], learned: float) -> dict:
    summary = table(runs=runs, learned=learned)
    for arm, costs in _cost_intervals(runs=runs, prefix="cost_to_target").items():
        summary[arm].update(costs)
    common = common_target(runs=runs)
    if common is not None:
        at_common = [retargeted(run=run, target=common) for run in runs if run.arm in COST_ARMS]
        for arm, costs in _cost_intervals(runs=at_common, prefix="cost_to_common_target").items():
            summary[arm].update(costs, common_target=common)
    for axis, name in ((0, "time"), (1, "cost")):
        budget, found = at_budget(runs=runs, axis=axis)
        for arm, values in found.items():
            summary[arm][f"return_at_equal_{name}"] = _interval(values)
            summary[arm][f"equal_{name}_budget"] = budget
    for arm in summary:
        mine = [r for r in runs if r.arm == arm]
        summary[arm]["staleness_mean"] = float(np.nanmean([r.staleness_mean for r in mine]))
        summary[arm]["staleness_max"] = float(np.nanmax([r.staleness_max for r in mine]))
        for key in ("parameter_busy", "learners_computing"):   # None in runs recorded before these existed
            values = [getattr(r, key, None) for r in mine if getattr(r, key, None) is not None]
            summary[arm][key] = float(np.mean(values)) if values else None
        steady: Counter = Counter()
        for run in mine:
            steady.update(getattr(run, "staleness_counts_steady", {}))
        summary[arm]["staleness_counts_steady"] = dict(steady)
    return summary


def _share(value: float | None, *, percent: bool = True) -> str:
    if value is None:
        return "—"
    return f"{100 * value:.1f} %" if percent else f"{value:.2f}"


def _iqm(summary: dict, arm: str, key: str) -> dict | None:
    return summary.get(arm, {}).get(key)


def _versus(summary: dict, key: str, *, ours: str, theirs: str) -> str:
    """``ours`` against ``theirs`` on ``key``: ratio of the IQMs, and whether the intervals are apart."""
    a, b = _iqm(summary, ours, key), _iqm(summary, theirs, key)
    if a is None or b is None:
        return f"{ours} vs {theirs}: not measurable (an arm has no value)"
    def shown(entry: dict) -> str:
        return f"{entry['iqm']:.4g}" + ("" if entry["low"] is None else f" [{entry['low']:.4g}, {entry['high']:.4g}]")
    if a["low"] is None or b["low"] is None:
        apart = "one run: no interval"
    else:
        apart = "intervals apart" if a["low"] > b["high"] or a["high"] < b["low"] else "intervals overlap"
    ratio = a["iqm"] / b["iqm"] if b["iqm"] else float("nan")
    return f"{ours} {shown(a)} vs {theirs} {shown(b)} = {ratio:.2f}x ({apart})"


def claims(summary: dict) -> list[str]:
    """The paper's claims as measured: each figure with its interval (the verdict is written in the docs)."""
    best = {}
    for key in ("eval_return", "return_at_equal_time", "return_at_equal_cost"):
        present = [a for a in BASELINES if _iqm(summary, a, key) is not None]
        best[key] = max(present, key=lambda a: _iqm(summary, a, key)["iqm"], default=None)
    lines = ["2.2x reward (paper: stellaris vs PPO, final reward after 50 rounds; Fig. 11a: best vs softsync, "
             "SSP, async):"]
    for key, what in (("eval_return", "final eval, equal rounds"), ("return_at_equal_time", "equal simulated time"),
                      ("return_at_equal_cost", "equal cost")):
        lines.append(f"  {what}: {_versus(summary, key, ours='stellaris', theirs='ppo')}")
        if best[key] not in (None, "ppo"):
            lines.append(f"  {what}: {_versus(summary, key, ours='stellaris', theirs=best[key])} (best baseline)")
    lines += cost_claims(summary)
    lines.append("lower variance with truncation (Fig. 11b): tail variance "
                 + _versus(summary, "tail_variance", ours="stellaris", theirs="stellaris-no-truncation"))
    return lines


def cost_claims(summary: dict) -> list[str]:
    """-41 % cost, billed (cold starts included) and without cold starts and provisioned idle time (the paper's
    exclusion): total, to ``--target`` and to the common target (``common_target``)."""
    lines = ["-41% cost (paper: total training cost, 50 rounds; up to -31% vs PPO, -41% vs MinionsRL; pre-warm and "
             "keep-alive excluded):"]
    cheapest = min((a for a in BASELINES if _iqm(summary, a, "cost_usd")), default=None,
                   key=lambda a: _iqm(summary, a, "cost_usd")["iqm"])
    common = summary.get("stellaris", {}).get("common_target")
    for theirs in dict.fromkeys(["ppo", cheapest] if cheapest else ["ppo"]):
        for bill, suffix in (("billed", ""), ("excl. cold starts", "_excl_cold")):
            lines.append(f"  total cost, {bill}: "
                         f"{_versus(summary, f'cost{suffix}_usd', ours='stellaris', theirs=theirs)}")
            lines.append(f"  cost to target, {bill}: "
                         f"{_versus(summary, f'cost_to_target{suffix}_usd', ours='stellaris', theirs=theirs)}")
            if common is not None and theirs in COST_ARMS:
                lines.append(f"  cost to {common:.0f} (the highest return every stellaris and ppo run reached), "
                             f"{bill}: " + _versus(summary, f"cost_to_common_target{suffix}_usd", ours="stellaris",
                                                   theirs=theirs))
    return lines


def markdown(summary: dict) -> str:
    first = next(iter(summary.values()))
    lines = [f"equal time T = {first['equal_time_budget']:.1f} simulated s, equal cost C = "
             f"{first['equal_cost_budget']:.4f} USD", "",
             "| arm | eval IQM [95 %] | return at T | return at C | reached | time to target (s) | cost to target "
             "(USD) | cost to target excl. cold (USD) | run time (s) | run cost (USD) | run cost excl. cold (USD) "
             "| tail variance | staleness mean / max | grads/agg | refused | steps |", "|" + " --- |" * 16]
    for arm, s in summary.items():
        lines.append(
            f"| {arm} | {cell(s['eval_return'], '.0f')} | {cell(s['return_at_equal_time'], '.0f')} | "
            f"{cell(s['return_at_equal_cost'], '.0f')} | {s['reached_target']}/{s['seeds']} | "
            f"{cell(s['time_to_target_s'], '.1f')} | {cell(s['cost_to_target_usd'], '.4f')} | "
            f"{cell(s.get('cost_to_target_excl_cold_usd'), '.4f')} | "
            f"{cell(s['wall_s'], '.1f')} | {cell(s['cost_usd'], '.4f')} | {cell(s.get('cost_excl_cold_usd'), '.4f')} | "
            f"{cell(s['tail_variance'], '.0f')} | "
            f"{s['staleness_mean']:.2f} / {s['staleness_max']:.0f} | {s['gradients_per_aggregation']:.2f} | "
            f"{s['refused_share']:.0%} | {s['optimizer_steps']:.0f} |")
    lines.append("")
    lines += [f"staleness {arm}: {s['staleness_counts']}" for arm, s in summary.items()]
    lines += [f"aggregator {arm}: parameter busy {_share(s.get('parameter_busy'))}, "
              f"{_share(s.get('learners_computing'), percent=False)} learners computing, steady staleness "
              f"{s.get('staleness_counts_steady')}" for arm, s in summary.items()]
    return "\n".join(lines + [""] + claims(summary))


def measure(args: argparse.Namespace) -> list[Run]:
    args.root.mkdir(parents=True, exist_ok=True)
    try:
        if args.profile is None:
            raise ValueError("--profile: needed (nimbus simulate fit RUN_DIR --output PROFILE)")
        profile = tailed_profile(profile=args.profile, fraction=args.tail_fraction, factor=args.tail_factor,
                                 out=args.root / "profile-tailed.yaml")
    except ValueError as exc:   # bad input: exit 2 naming the key, before anything runs
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    common = simulated(profile=profile, actors=args.actors, sets=args.set)
    arms, seeds, rounds = (("ppo", "stellaris"), [0], 2) if args.smoke else (args.arms, args.seeds, args.rounds)
    runs = []
    for seed in seeds:
        for arm in arms:
            started = time.perf_counter()
            run = run_arm(arm=arm, seed=seed, rounds=rounds, root=args.root, extra=ARMS[arm], tail=args.tail,
                          eval_episodes=2 if args.smoke else args.eval_episodes, target=args.target,
                          straggler_factor=1.0, learners=args.learners, common=common)
            run = with_excl_cold(run=run, run_dir=args.root / f"{arm}-s{seed}")
            log.info("%s seed %d: eval %.1f, simulated %.1f s, %.4f USD (%.4f without cold starts), staleness "
                     "%.2f/%.0f; real %.0f s", arm, seed, run.eval_return, run.wall_s, run.cost_usd,
                     run.cost_excl_cold_usd, run.staleness_mean, run.staleness_max, time.perf_counter() - started)
            runs.append(run)
    return runs


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, help="a fitted profile (nimbus simulate fit)")
    parser.add_argument("--arms", nargs="*", default=list(PAPER_ARMS), choices=list(ARMS))
    parser.add_argument("--rounds", type=int, default=50, help="the paper trains 50 rounds")
    parser.add_argument("--learners", type=int, default=16)
    parser.add_argument("--actors", type=int, default=16, help="× 4 envs × 64 steps = rows a round")
    parser.add_argument("--tail-fraction", type=float, help="share of learner calls that straggle (default: fitted)")
    parser.add_argument("--tail-factor", type=float, help="how much slower a straggling call is (default: fitted)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more config overrides")
    parser.add_argument("--collect", nargs="+", type=Path, metavar="RUN_DIR",
                        help="finished run directories <arm>-s<seed> to measure (with --merge's files)")
    add_shared_arguments(parser=parser, root=REPO / "runs" / "stellaris-paper-scale",
                         output=REPO / "benchmarks" / "results" / "stellaris_paper_scale.json")
    return parser.parse_args()


def main() -> None:
    args = parse()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    if args.merge or args.collect:
        runs = [PaperRun(**r) for path in args.merge or [] for r in json.loads(path.read_text())["runs"]]
        try:
            runs += [with_excl_cold(run=collected(run_dir=d, eval_episodes=args.eval_episodes, tail=args.tail,
                                                  target=args.target), run_dir=d) for d in args.collect or []]
        except ValueError as exc:   # bad input: exit 2 naming the directory
            print(f"error: --collect: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    else:
        runs = measure(args)
    runs = [retargeted(run=run, target=args.target) for run in runs]
    summary = summarize(runs=runs, learned=args.learned)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                    "load_1m_before": load_before, "load_1m_after": os.getloadavg()[0],
                    "real_s": time.perf_counter() - started},
        "args": {k: str(v) for k, v in vars(args).items()}, "runs": [asdict(r) for r in runs],
        "summary": summary, "claims": claims(summary)}, indent=2))
    print(markdown(summary))


if __name__ == "__main__":
    main()
