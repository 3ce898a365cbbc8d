"""``nimbus bench`` writes its results under runs/bench/ (beside runs), never a benchmarks/ folder of the cwd."""

from __future__ import annotations

import pytest

from nimbus.cli import make_parser


@pytest.mark.parametrize("command", ["transfer", "sample"])
def test_bench_results_go_under_runs(command: str) -> None:
    args = make_parser().parse_args(["bench", command])
    assert args.json == f"runs/bench/{command}.json"
