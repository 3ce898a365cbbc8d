"""Shared fixtures: a per-test shared-memory prefix, and a check that no test leaks a segment; a user's networks."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from _pytest.nodeid import coerce_node_id  # pytest 9's node ids (see pytest_collection_modifyitems)

from cluster_fixtures import ray_local, ray_two_nodes, redis_server  # noqa: F401  (fixtures for every test module)
from nimbus.data import shm
from support import USER_NETS


@pytest.fixture(autouse=True)
def _isolated_shm_prefix(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """Each test gets its own segment prefix so leaks are attributable and swept."""
    prefix = f"nimbus_{os.getpid()}_t{abs(hash(request.node.nodeid)) % 10**8}_"
    monkeypatch.setenv(shm.PREFIX_ENV, prefix)
    yield prefix
    shm.sweep(prefix=prefix)


@pytest.fixture
def prefix(_isolated_shm_prefix: str) -> str:
    """This test's shared-memory prefix, for a test that lists its segments or hands it to a subprocess."""
    return _isolated_shm_prefix


@pytest.fixture
def user_nets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The module ``usernets`` (support.USER_NETS: a user's PPO policy and DQN Q-network, and networks that do not
    fit) importable here (sys.path) and in the workers this test starts (PYTHONPATH); yields its folder."""
    code = tmp_path / "usernets_code"
    code.mkdir()
    (code / "usernets.py").write_text(USER_NETS)
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")])))
    yield code
    sys.modules.pop("usernets", None)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):
    """``code, said = run_cli("train", str(path), "--set", "x=1")``: nimbus's command line in this process
    (nimbus.cli.main, whose return value the console script exits with; no interpreter to start and no torch to
    import again), its exit code (argparse's SystemExit too: 2 for usage errors, 0 for --help) and everything it
    printed with white space folded (the console wraps long lines). The console script itself:
    tests/integration/test_cli.py."""
    from nimbus.cli import main
    from nimbus.runtime import spare_server

    def run(*args: str) -> tuple[int, str]:
        try:
            code = main(list(args))
        except SystemExit as exc:   # argparse: usage errors exit 2, --help exits 0
            code = exc.code if isinstance(exc.code, int) else 1
        finally:   # a train refused after its config validated (a missing env) leaves the fork server it started
            spare_server.close_early()   # early; a later test's runtime would adopt it, with this test's environment
        out, err = capsys.readouterr()
        return code, " ".join((out + err).split())

    return run


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's hook reads the xdist_group markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests skip without CUDA. Groups for pytest-xdist (``make test`` runs ``-n 2 --dist loadgroup``; a
    group's tests run on one worker, one at a time): every ``ray`` test in one group (each module starts its own
    local Ray instance with num_cpus=2, the whole machine; two at once would share it), and the tests of one
    module-scoped fixture in one (test_cli's trained run is trained once, not once per worker). Under xdist the
    long work goes out first (``long_work_first``)."""
    skip = None if torch.cuda.is_available() else pytest.mark.skip(reason="no CUDA device on this machine")
    # pytest-xdist 3.8's worker names a test's group by a suffix on its node id (item._nodeid = "<id>@<group>"), but
    # pytest 9 derives nodeid from item._id and ignores _nodeid: every group was split across the workers (the ray
    # tests ran on both, test_cli's module run was trained twice). The suffix is written here, where pytest 9 reads it
    loadgroup = bool(getattr(config.option, "loadgroup", False))   # a worker of -n N --dist loadgroup
    for item in items:
        if skip is not None and "gpu" in item.keywords:
            item.add_marker(skip)
        groups = xdist_groups(item)
        for group in groups:
            item.add_marker(pytest.mark.xdist_group(group))
        if loadgroup and groups and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(sorted(groups))}")
    items[:] = two_node_tests_last(items)
    if loadgroup:
        items[:] = long_work_first(items)


def two_node_tests_last(items: list[pytest.Item]) -> list[pytest.Item]:
    """The tests of cluster_fixtures' two-node cluster right after the last other ray test: every other ray test
    shares one local Ray, which the cluster replaces; in the middle of the ray group it cost a second start of the
    local one (5-7 s) after them."""
    two_nodes = [item for item in items if "ray_two_nodes" in getattr(item, "fixturenames", ())]
    rest = [item for item in items if item not in two_nodes]
    ray = [index for index, item in enumerate(rest) if "ray" in item.keywords]
    return rest[:ray[-1] + 1] + two_nodes + rest[ray[-1] + 1:] if two_nodes and ray else items


def long_work_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """For pytest-xdist, which hands work out in the order of each group's (or lone test's) first item: the ray group
    (one worker's ~4 minutes) first, then every module holding a ``slow`` test, then the rest, each in collection
    order. A long piece handed out last kept one worker busy while the other had finished (longest first is the usual
    cure). Whole modules move, so a module's tests stay together with its module-scoped fixtures."""
    slow_modules = {item.module for item in items if "slow" in item.keywords and "ray" not in item.keywords}
    ray = [item for item in items if "ray" in item.keywords]
    slow = [item for item in items if "ray" not in item.keywords and item.module in slow_modules]
    return ray + slow + [item for item in items if "ray" not in item.keywords and item.module not in slow_modules]


def xdist_groups(item: pytest.Item) -> list[str]:
    if "ray" in item.keywords:
        return ["ray"]
    info = getattr(item, "_fixtureinfo", None)
    shared = [] if info is None else [name for name, defs in info.name2fixturedefs.items()   # pytest's own aside
                                      if defs and defs[-1].scope in ("module", "package", "session")
                                      and not defs[-1].func.__module__.startswith("_pytest")]
    return [f"{item.module.__name__}.{name}" for name in shared if item.module is not None]


@pytest.hookimpl(trylast=True)  # after the fixtures' own teardown
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """cluster_fixtures keeps one local Ray from one ray module to the next (they run back to back: the "ray"
    group); it goes down after the last of them, before the next test that is not a ray test."""
    fixtures = sys.modules.get("cluster_fixtures")
    if fixtures is not None and "ray" in item.keywords and (nextitem is None or "ray" not in nextitem.keywords):
        fixtures.shutdown_ray()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Skips are never silent: the count and every distinct reason, whatever ``-r`` says (a machine
    without redis-server or Ray shows here which promises went untested)."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.section(f"{len(skipped)} skipped", sep="=", yellow=True, bold=True)
    for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.line(f"{count:4d} skipped: {reason}")


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Functions called in-process set torch's thread count for their worker; that must not leak into later
    tests (the driver's thread count changes its initial weights bitwise: orthogonal init's QR)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
