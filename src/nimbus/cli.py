"""``nimbus`` command line: train, report, envs, eval, export, compare, sweep, plan, simulate.

Exit codes: 0 success (also after SIGINT with a final checkpoint), 1 run failure, 2 bad config/usage.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console
from rich.markup import escape

from nimbus.data.shm import streaming_copy_env
from nimbus.errors import ConfigError, NimbusError
from nimbus.run.rundir import RunDirError

if TYPE_CHECKING:
    from nimbus.config import NimbusConfig

console = Console(stderr=True)
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)   # a full disk or quota, wherever the run writes


def _start_fork_server_early(*, configs: list[NimbusConfig]) -> None:
    """Start the local backend's fork server as a fork of this process once it has imported torch and gymnasium
    (runtime/spare_server.py ``start_early``), so that the template imports nothing again and warms torch's
    optimizer while the driver imports and builds the rest: only when every config runs on the local backend's fork
    server. Called after the configs validated (which imports no torch), so a refused config exits 2 at once."""
    if not all((c.runtime.backend, c.runtime.start_method) == ("local", "fork_server") for c in configs):
        return
    from nimbus.runtime.forkserver import TRAINING_PRELOAD
    from nimbus.runtime.spare_server import start_early

    start_early(preload=TRAINING_PRELOAD, fork_driver=True)


def _cmd_train(args: argparse.Namespace) -> int:
    from nimbus.config import load_config

    resume = Path(args.resume) if args.resume else None
    if len(args.config) > 1:  # several workloads on one pool (run/workloads.py)
        return _train_workloads(args)
    args.config = args.config[0] if args.config else None
    if args.config is None and resume is None:
        raise ConfigError("nimbus train needs a config file, or --resume RUN_DIR (which reuses RUN_DIR/config.yaml)")
    config_path = Path(args.config) if args.config else resume / "config.yaml"
    if not config_path.exists():
        raise ConfigError(f"{config_path}: no such config file")
    config = load_config(path=config_path, overrides=args.set or [])
    _start_fork_server_early(configs=[config])
    from nimbus.report.render import print_summary
    from nimbus.run.loop import train

    result = train(config=config, run_dir=Path(args.run_dir) if args.run_dir else None, resume_from=resume)
    print_summary(run_dir=result.run_dir, console=Console())
    Console().print(f"run directory: {result.run_dir}")
    return 0


def _train_workloads(args: argparse.Namespace) -> int:
    from nimbus.config import load_config

    if args.resume or args.run_dir:
        raise ConfigError("--resume and --run-dir take one config; several configs each get their own run dir")
    for path in args.config:
        if not Path(path).exists():
            raise ConfigError(f"{path}: no such config file")
    configs = [load_config(path=Path(path), overrides=args.set or []) for path in args.config]
    _start_fork_server_early(configs=configs)
    from nimbus.report.render import print_summary
    from nimbus.run.workloads import train_workloads

    for result in train_workloads(configs=configs):
        print_summary(run_dir=result.run_dir, console=Console())
        Console().print(f"run directory: {result.run_dir}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from nimbus.report.render import print_summary, render_report

    if (Path(args.run_dir) / "population.json").exists():  # several policies / PBT: one curve per member
        from nimbus.pbt.report import render_population
        Console().print(f"report: {render_population(run_dir=Path(args.run_dir))}")
        return 0
    path = render_report(run_dir=Path(args.run_dir))
    if (Path(args.run_dir) / "summary.json").exists():
        print_summary(run_dir=Path(args.run_dir), console=Console())
    Console().print(f"report: {path}")
    return 0


def _cmd_envs(args: argparse.Namespace) -> int:
    from rich.table import Table

    from nimbus.envs.registry import extra_available, list_envs, required_extra, untested_ids

    table = Table(title="environments nimbus can train",
                  caption="tested: trained by nimbus's own tests. Any other gymnasium id works too, and your own "
                          "env (env.id: module:EnvId or env.imports; README). --all lists every registered id.")
    for column in ("id", "family", "actions", "extra", "available here", "tested"):
        table.add_column(column, no_wrap=column == "id", overflow="fold")   # at 80 columns: wrapped, never cut
    for info in list_envs():
        table.add_row(info.env_id, f"{info.family} (multi-agent)" if info.multi_agent else info.family,
                      info.action_kind, info.extra or "-",
                      "yes" if info.available else "no", "tested")
    for env_id in untested_ids() if args.all else ():
        extra = required_extra(env_id=env_id)
        table.add_row(env_id, "-", "-", extra or "-", "yes" if extra_available(extra) else "no", "-")
    Console().print(table)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from nimbus.report import compare

    run_dirs = [Path(d) for d in args.run_dirs]
    rows = compare.compare_runs(run_dirs=run_dirs, output=Path(args.output), group_by=args.group_by)
    profile = compare.profile_path(output=Path(args.output))
    groups, improvements = compare.group_statistics(run_dirs=run_dirs, score=args.score, group_by=args.group_by,
                                                    profile=profile)
    console = Console()
    console.print(compare.comparison_table(rows=rows))
    console.print(compare.statistics_table(groups=groups, score=args.score))
    if improvements:
        console.print(compare.improvement_table(improvements=improvements))
    console.print(f"figures: {escape(str(args.output))}, {escape(str(profile))}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    """One policy's run; each member of a run of several policies; a multi-agent run's agents together."""
    from nimbus.marless.evaluate import evaluate_marless_run, is_multiagent_run
    from nimbus.roles.evaluate import evaluate_checkpoint, member_directories

    path, console = Path(args.path), Console()
    if args.video:   # frames are drawn off-screen (rgb_array): SDL needs no display, and says so on stderr without one
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    if is_multiagent_run(path=path):
        marless = evaluate_marless_run(path=path, episodes=args.episodes, seed=args.seed,
                                       explore=not args.deterministic, video=args.video)
        versions = ", ".join(f"{policy} v{version}" for policy, version in marless.policy_versions.items())
        console.print(f"{versions}: mean global return {marless.mean_return:.2f} ± {marless.std_return:.2f} over "
                      f"{len(marless.returns)} episodes")
        console.print("per agent: " + ", ".join(f"{agent} ({marless.agent_policy[agent]}) {value:.2f}"
                                                for agent, value in marless.agent_returns.items()))
        if marless.video_dir is not None:
            console.print(f"videos: {marless.video_dir}")
        return 0
    for directory in member_directories(path=path) or [path]:
        result = evaluate_checkpoint(path=directory, episodes=args.episodes, seed=args.seed,
                                     explore=not args.deterministic, video=args.video)
        name = f"{directory.name}: " if directory != path else ""
        console.print(f"{name}policy_version {result.policy_version}: mean return {result.mean_return:.2f} "
                      f"± {result.std_return:.2f} over {len(result.returns)} episodes")
        if result.video_dir is not None:
            console.print(f"videos: {result.video_dir}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    """One policy's run; each member of a run of several policies; each policy in use of a multi-agent run."""
    from nimbus.marless.evaluate import is_multiagent_run
    from nimbus.roles.evaluate import member_directories
    from nimbus.run.export import export_marless_run, export_run

    run_dir, output = Path(args.run_dir), Path(args.output) if args.output else None
    if is_multiagent_run(path=run_dir):
        paths = export_marless_run(run_dir=run_dir, output_dir=output, fmt=args.format)
    elif members := member_directories(path=run_dir):
        if output is not None:
            raise ConfigError("--output: a run of several policies writes one file per member, into each "
                              "member's export/; leave --output out")
        paths = [export_run(run_dir=member, fmt=args.format) for member in members]
    else:
        paths = [export_run(run_dir=run_dir, output=output, fmt=args.format)]
    for path in paths:
        Console().print(f"exported ({args.format}): {path}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from nimbus.sweep.study import SweepOptions, run_sweep

    options = SweepOptions(trials=args.trials, seeds=args.seeds, objective=args.objective)
    console = Console()
    result = run_sweep(config_path=Path(args.config), space_path=Path(args.space), options=options,
                       sweep_dir=Path(args.dir) if args.dir else None, overrides=args.set or [],
                       say=lambda line: console.print(escape(line), highlight=False))
    console.print(f"sweep directory: {escape(str(result.sweep_dir))} ({result.finished} trials; trials.csv, sweep.png)")
    if result.interrupted_by is not None:
        console.print(f"stopped by {result.interrupted_by}: {result.finished} of {args.trials} trials finished; the "
                      "trial it was in is not counted and runs again when the same command resumes the sweep")
        if result.best_config_path is None:
            return 0
    if result.best_config_path is None:
        console.print("no trial completed: no best config")
        return 1
    console.print(f"best {args.objective}: {result.best_value:,.4g} with "
                  f"{escape(', '.join(f'{k}={v}' for k, v in result.best_values.items()))}")
    console.print(f"best config: {escape(str(result.best_config_path))}")
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nimbus", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train from a YAML config, or resume a run")
    p.add_argument("config", nargs="*", help="the YAML config (default with --resume: RUN_DIR/config.yaml); "
                   "several: independent workloads sharing one pool of workers (fair share by runtime.share_weight)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue RUN_DIR from its newest checkpoint: weights, "
                   "optimizer, counters; raise train.total_env_steps with --set to train longer (schedules keep "
                   "the run's original horizon)")
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE", help="override a config value")
    p.add_argument("--run-dir", help="write the run here instead of runs/<name>-<timestamp> (a new or empty "
                   "directory; one process at a time)")
    p.set_defaults(func=_cmd_train)
    p = sub.add_parser("report", help="re-render report.png and the summary from a run directory")
    p.add_argument("run_dir")
    p.set_defaults(func=_cmd_report)
    p = sub.add_parser("envs", help="list the tested environments and the extra each needs")
    p.add_argument("--all", action="store_true", help="also every other id registered with gymnasium (untested)")
    p.set_defaults(func=_cmd_envs)
    p = sub.add_parser("eval", help="evaluate the newest checkpoint of a run")
    p.add_argument("path")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--deterministic", action="store_true", help="greedy/mean actions")
    p.add_argument("--video", action="store_true", help="record the episodes into RUN_DIR/videos (rgb_array; "
                   "warns and goes on where the machine cannot render)")
    p.set_defaults(func=_cmd_eval)
    p = sub.add_parser("export", help="write the trained policy (observation -> action) as a self-contained file")
    p.add_argument("run_dir")
    p.add_argument("--format", default="torchscript", choices=["torchscript", "onnx"],
                   help="torchscript (torch.jit.load) or onnx (onnxruntime; the onnx extra)")
    p.add_argument("--output", help="file to write (default: RUN_DIR/export/policy.pt or policy.onnx); for a "
                   "multi-agent run the directory of the <policy>.pt files (default: RUN_DIR/export)")
    p.set_defaults(func=_cmd_export)
    p = sub.add_parser("compare", help="return vs env steps, wall time and cost for several runs, and a table")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--output", default="compare.png", help="figure path (default: ./compare.png); the performance "
                   "profile goes beside it as <stem>-profile.png")
    p.add_argument("--score", default="final_return", choices=["final_return", "eval_return", "return_per_usd"],
                   help="the per-run number the statistics across seeds use (default: final_return)")
    p.add_argument("--group-by", default="config", choices=["config", "name"],
                   help="config: runs whose configs differ only in seed are one group (default); name: runs of "
                   "one config name, each env a stratum of the bootstrap")
    p.set_defaults(func=_cmd_compare)
    p = sub.add_parser("sweep", help="hyperparameter search (Optuna TPE, median pruning) for return or return per "
                       "dollar; resumes when run again")
    p.add_argument("config")
    p.add_argument("--space", required=True, help="YAML: config key -> {float: [lo, hi], log: true} | "
                   "{int: [lo, hi]} | {choice: [...]}")
    p.add_argument("--trials", type=int, required=True, help="trials to finish (an interrupted one runs again)")
    p.add_argument("--seeds", type=int, default=1, help="seeds per trial, trained at once on one pool (default 1)")
    p.add_argument("--objective", default="return", choices=["return", "return_per_usd"])
    p.add_argument("--dir", help="sweep directory (default: <output.root_dir>/sweep-<name>); the same directory "
                   "resumes the sweep")
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE", help="override a base config value")
    p.set_defaults(func=_cmd_sweep)
    from nimbus.bench.commands import add_bench_commands
    from nimbus.run.check_env import add_check_env_command
    from nimbus.run.plan_commands import add_plan_commands

    add_plan_commands(sub)  # nimbus plan | simulate fit
    add_bench_commands(sub)  # nimbus bench transfer | sample
    add_check_env_command(sub)  # nimbus check-env ID
    return parser


def _restart_with_streaming_copies() -> None:
    """``nimbus train`` as a program starts itself once more with glibc's streaming-copy tunable set when it is missing
    (data/shm.py ``streaming_copy_env``: read only when a process starts): its workers are forks of this process
    (``_start_fork_server_early``), and large bodies copied into shared memory need it."""
    env = streaming_copy_env(dict(os.environ))
    if env != os.environ:
        os.execve(sys.executable, sys.orig_argv, env)


def main(argv: list[str] | None = None) -> int:
    """The command line ``argv``, or this process's own (``sys.argv``) when None: the program."""
    args = make_parser().parse_args(argv)
    if argv is None and args.func is _cmd_train:
        _restart_with_streaming_copies()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except ConfigError as exc:
        label = "run directory" if isinstance(exc, RunDirError) else "config error"
        console.print(f"[bold red]{label}[/]: {escape(str(exc))}", highlight=False)
        return 2
    except NimbusError as exc:
        console.print(f"[bold red]run failed[/]: {escape(str(exc))}", highlight=False)
        return 1
    except OSError as exc:
        if exc.errno not in DISK_FULL_ERRNOS:
            raise
        console.print(f"[bold red]disk full[/]: {escape(str(exc))}. The run stopped; its checkpoints that were "
                      "written are kept (a save cut short leaves none half-written). Free space, then continue "
                      "with `nimbus train --resume RUN_DIR`.", highlight=False)
        return 1


def program() -> NoReturn:
    """The ``nimbus`` command (console script and ``python -m nimbus.cli``): `main` on this process's arguments,
    then `exit_now`."""
    exit_now(code=main())


def exit_now(*, code: int) -> NoReturn:
    """Exit with ``code`` once the atexit handlers have run, without the interpreter's teardown of its modules: with
    torch loaded that took 0.6-0.8 s of a 3 s one-round ``nimbus train`` here (objects freed one by one in a process
    about to end). Files, trackers, workers and segments are closed before `main` returns, and atexit's handlers
    (logging's flush, weakref finalizers, multiprocessing's children) still run. Where a non-daemon thread is still
    running (the interpreter would wait for it) or atexit cannot run its handlers, a plain exit instead."""
    run_handlers = getattr(atexit, "_run_exitfuncs", None)
    waiting = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if run_handlers is None or waiting:
        sys.exit(code)
    run_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a pipe closed by its reader, or a stream already closed
            pass
    os._exit(code)


if __name__ == "__main__":
    program()
