"""``nimbus bench …``: the command-line front of the benchmarks (the scripts in benchmarks/ call the same code).

    nimbus bench transfer [--full] [--senders 1,4] [--sizes 64K,1M,16M] [--transports …] [--json PATH]
    nimbus bench sample   [--envs CartPole-v1,Hopper-v5] [--actors N] [--json PATH]

Results go under ``runs/bench/`` by default, beside a run's directories (``output.root_dir``'s default), not into a
``benchmarks/`` folder of whatever directory the command runs in; the repository's scripts pass their own paths.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

RESULTS_DIR = Path("runs") / "bench"


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _show_and_save(*, report: Any, print_table: Callable[..., None], write_json: Callable[..., None], path: str,
                   note: str = "") -> int:
    """A benchmark's table printed, its JSON written to ``path`` and where it went said; the command's exit code."""
    print_table(report=report, console=Console(width=160))
    write_json(report=report, path=Path(path))
    Console().print(f"results: {path}{note}")
    return 0


def _cmd_transfer(args: argparse.Namespace) -> int:
    from nimbus.bench.transfer import TransferGrid, parse_size, print_table, run_transfer, write_json

    grid = TransferGrid.full() if args.full else TransferGrid()
    overrides = {"repeats": args.repeats, "messages": args.messages}
    if args.senders:
        overrides["senders"] = tuple(int(n) for n in _csv(args.senders))
    if args.sizes:
        overrides["sizes"] = tuple(parse_size(size) for size in _csv(args.sizes))
    if args.transports:
        overrides["transports"] = _csv(args.transports)
    if args.no_lz4:
        overrides["lz4_sizes"] = ()
    grid = TransferGrid(**{**grid.__dict__, **overrides})
    report = run_transfer(grid=grid)
    return _show_and_save(report=report, print_table=print_table, write_json=write_json, path=args.json,
                          note=f" ({report.wall_s:.0f} s)")


def _cmd_sample(args: argparse.Namespace) -> int:
    from nimbus.bench.sample import SampleSpec, print_sample_table, run_sample, write_sample_json

    spec = SampleSpec(env_ids=_csv(args.envs), num_actors=args.actors, repeats=args.repeats,
                      num_envs_per_actor=args.num_envs, fragment_steps=args.fragment_steps,
                      fragments=args.fragments)
    return _show_and_save(report=run_sample(spec=spec), print_table=print_sample_table, write_json=write_sample_json,
                          path=args.json)


def add_bench_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``nimbus bench transfer`` and ``nimbus bench sample`` on the top-level subparsers."""
    bench = sub.add_parser("bench", help="data-plane and sampling benchmarks").add_subparsers(dest="bench",
                                                                                              required=True)
    p = bench.add_parser("transfer", help="XingTian's transmission benchmark: N senders → 1 receiver, every transport")
    p.add_argument("--full", action="store_true", help="1,2,4,8 senders × 64K,1M,16M,64M (long)")
    p.add_argument("--senders", help="comma-separated sender counts (default 1,4)")
    p.add_argument("--sizes", help="comma-separated message sizes, e.g. 64K,1M,16M")
    p.add_argument("--transports", help="comma-separated subset of memcpy,memcpy_warm,mp_queue,ray,redis,"
                                        "channel_segment,channel")
    p.add_argument("--messages", type=int, default=20, help="messages per sender (XingTian: 20)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-lz4", action="store_true", help="skip the LZ4 cells")
    p.add_argument("--json", default=str(RESULTS_DIR / "transfer.json"))
    p.set_defaults(func=_cmd_transfer)
    p = bench.add_parser("sample", help="env steps/s of N actor functions vs N × one process")
    p.add_argument("--envs", default="CartPole-v1,Hopper-v5")
    p.add_argument("--actors", type=int, default=None, help="actor functions (default: the number of cores)")
    p.add_argument("--num-envs", type=int, default=4, help="envs per actor")
    p.add_argument("--fragment-steps", type=int, default=256, help="steps per env per invocation")
    p.add_argument("--fragments", type=int, default=6, help="invocations per actor per repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=str(RESULTS_DIR / "sample.json"))
    p.set_defaults(func=_cmd_sample)
