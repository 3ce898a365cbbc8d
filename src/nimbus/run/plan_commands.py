"""``nimbus plan`` (time per round and cost at another scale, from runs' ledgers or simulated runs) and ``nimbus
simulate fit`` (the simulated backend's profile from a real run's ledger): their parsers and handlers, added to the
command line by cli.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from nimbus.errors import ConfigError


def add_plan_commands(sub: Any) -> None:
    """``plan`` and ``simulate fit`` on ``sub`` (the command line's subparsers)."""
    p = sub.add_parser("plan", help="predict time per round and cost at another scale: from runs' ledgers "
                       "(timing-only, the default) or, with --simulate, time, cost and return from simulated runs")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="timing-only: profiled runs (several sizes fit "
                   "better)")
    p.add_argument("--actors", type=int, default=None, help="timing-only: actors per round (required)")
    p.add_argument("--learners", type=int, default=1)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--capacity-cpus", type=float, default=None, help="CPU slots for actors (default: unbounded)")
    p.add_argument("--pricing", help="pricing YAML (default: the packaged one)")
    p.add_argument("--simulate", action="store_true", help="train --config on the simulated backend once per seed "
                   "(real learning, virtual time: docs/simulated.md) and report IQM and 95 %% intervals")
    p.add_argument("--config", help="--simulate: the YAML config (its simulation: section gives the durations)")
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE", help="--simulate: override a config value "
                   "(the target scale: actors.scaling.num_actors=1000, stellaris.learners=16, ...)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="--simulate: seeds (default 0 1 2)")
    p.add_argument("--dir", help="--simulate: keep the runs here as seed-<n>/ (default: a temporary directory)")
    p.set_defaults(func=_cmd_plan)
    p = sub.add_parser("simulate", help="the simulated backend's profiles (runtime.backend: simulated)")
    simulate = p.add_subparsers(dest="simulate_command", required=True)
    p = simulate.add_parser("fit", help="fit per-kind durations, cold starts, stragglers and failures from a "
                            "real run's ledger into a YAML that simulation.profile loads")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="real runs; several batch sizes also fit the "
                   "learner's per-row time")
    p.add_argument("--output", help="profile path (default: the first RUN_DIR/simulation-profile.yaml)")
    p.set_defaults(func=_cmd_simulate_fit)


def _cmd_plan(args: argparse.Namespace) -> int:
    if args.simulate:
        return _plan_simulated(args)
    from nimbus.cost.planner import check_scale, profile_runs, simulate
    from nimbus.cost.pricing import load_pricing

    if not args.run_dirs or args.actors is None:
        raise ConfigError("plan: the timing-only model needs RUN_DIR... and --actors (or --simulate --config)")
    if args.config or args.set:
        raise ConfigError("plan: --config and --set are for --simulate (the timing-only model reads RUN_DIRs)")
    check_scale(actors=args.actors, learners=args.learners, rounds=args.rounds, capacity_cpus=args.capacity_cpus)
    try:
        profile = profile_runs(run_dirs=[Path(d) for d in args.run_dirs])
    except (OSError, KeyError, StopIteration, ValueError) as exc:
        raise ConfigError(f"cannot profile {args.run_dirs}: {type(exc).__name__}: {exc}") from None
    plan = simulate(profile=profile, actors=args.actors, learners=args.learners, rounds=args.rounds,
                    pricing=load_pricing(path=Path(args.pricing) if args.pricing else None),
                    capacity_cpus=args.capacity_cpus)
    Console().print(f"{plan.actors} actors x {plan.learners} learners, {plan.rounds} rounds: "
                    f"{plan.round_s_mean:.3f} s a round (p90 {plan.round_s_p90:.3f} s), {plan.wall_s:.1f} s in all; "
                    f"serverless ${plan.serverless_usd:.4f}, serverful ${plan.serverful_usd:.4f}")
    return 0


def _plan_simulated(args: argparse.Namespace) -> int:
    """``nimbus plan --simulate``: whole simulated runs, one per seed (run/plan.py), then IQM and intervals."""
    import tempfile

    from nimbus.run.plan import aggregate_seeds, plan_configs, run_seeds

    if not args.config or args.run_dirs or args.actors is not None or args.pricing or args.capacity_cpus:
        raise ConfigError("plan --simulate: give --config (and --set KEY.PATH=VALUE for the scale: "
                          "actors.scaling.num_actors, stellaris.learners, runtime.capacity_cpus...), not RUN_DIRs, "
                          "--actors, --capacity-cpus or --pricing")
    configs = plan_configs(config_path=Path(args.config), overrides=args.set or [], seeds=args.seeds)
    out = Console()
    with tempfile.TemporaryDirectory(prefix="nimbus-plan-") as tmp:
        root = Path(args.dir) if args.dir else Path(tmp)
        runs = run_seeds(configs=configs, root=root, say=lambda line: out.print(escape(line), highlight=False))
    if runs.interrupted_by is not None:
        out.print(f"stopped by {runs.interrupted_by} during seed {runs.interrupted_seed} (not counted): "
                  f"{len(runs.done)} of {len(configs)} seed(s) completed", highlight=False)
        if not runs.done:
            return 0
    plan = aggregate_seeds(seeds=list(runs.done))
    for s in plan.seeds:
        shown = "n/a" if s.final_return is None else f"{s.final_return:.1f}"
        out.print(f"seed {s.seed}: {s.rounds} rounds, {s.env_steps} env steps, {s.wall_s:.1f} s simulated "
                  f"(round {s.round_s_median:.3f} s), serverless ${s.serverless_usd:.4f}, serverful "
                  f"${s.serverful_usd:.4f}, return {shown}")
    for name, interval in (("wall_s", plan.wall_s), ("round_s", plan.round_s), ("serverless_usd", plan.serverless_usd),
                           ("serverful_usd", plan.serverful_usd), ("final_return", plan.final_return)):
        out.print(f"{name}: " + ("n/a (no seed finished an episode)" if interval is None else
                                 f"IQM {interval.point:.4g} [{_bound(interval.low)}, {_bound(interval.high)}]"))
    out.print(f"over {len(plan.seeds)} seed(s), 95 % bootstrap intervals; simulated seconds and dollars "
              "(docs/simulated.md)")
    return 0


def _bound(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _cmd_simulate_fit(args: argparse.Namespace) -> int:
    from nimbus.runtime.simulated_fit import fit_profile, write_profile

    run_dirs = [Path(d) for d in args.run_dirs]
    profile = fit_profile(run_dirs=run_dirs)
    path = write_profile(profile=profile, path=Path(args.output or run_dirs[0] / "simulation-profile.yaml"))
    for kind, model in profile.functions.items():
        print(f"{kind:10s} median {model.median_s:.4f} s  sigma {model.sigma:.3f}  cold {model.cold_start_s:.3f} s  "
              f"first call +{model.first_call_s:.3f} s  per row {model.per_row_s:.2e} s  "
              f"stragglers {model.straggler_fraction:.3f} x{model.straggler_factor:.2f}  "
              f"failures {model.failure_fraction:.3f}")
    print(f"wrote {path}")
    return 0
