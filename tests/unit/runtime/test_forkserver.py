"""The fork server (runtime/forkserver.py): workers forked from a template, no pickles, no orphans (P15)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.forkserver import TRAINING_PRELOAD, ForkServer
from runtime_helpers import evil_pickle, pid_alive, wait_for

INTROSPECT = FunctionSpec(name="introspect", entrypoint="nimbus.runtime.builtin:introspect", timeout_s=20.0)


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_workers_are_forked_by_the_template_and_start_in_milliseconds(make_runtime) -> None:
    runtime, ledger = make_runtime(start_method="fork_server", preload=("numpy",))
    runtime.prewarm(spec=INTROSPECT, count=1, wait_s=30)  # the template imports the entrypoint's module
    runtime.prewarm(spec=INTROSPECT, count=2, wait_s=30)  # these forks find it imported
    headers = [f.result(timeout=20).header for f in runtime.map(spec=INTROSPECT, requests=[Message()] * 3)]
    server_pid = runtime._pool._spawner._server.pid
    assert {_ppid(h["pid"]) for h in headers} == {server_pid}
    assert headers[0]["omp_num_threads"] == "1" and headers[0]["torch_loaded"] is False
    later = [r.init_s for r in ledger.records() if r.outcome == "prewarm"][1:]
    assert len(later) == 2 and max(later) < 0.5, later  # a fresh interpreter needs several times this


def test_spawn_method_still_starts_children_of_the_driver(make_runtime) -> None:
    runtime, _ = make_runtime(start_method="spawn")
    header = runtime.invoke(spec=INTROSPECT, request=Message()).result(timeout=30).header
    assert _ppid(header["pid"]) == os.getpid() and runtime._pool._spawner._server is None


def test_a_dead_fork_server_is_replaced_and_work_goes_on(make_runtime) -> None:
    runtime, _ = make_runtime(start_method="fork_server")
    first = runtime.invoke(spec=INTROSPECT, request=Message()).result(timeout=30).header
    server = runtime._pool._spawner._server
    old_pid = server.pid
    os.kill(old_pid, signal.SIGKILL)
    assert wait_for(lambda: not pid_alive(first["pid"]), timeout_s=10)  # its workers die with it
    second = runtime.invoke(spec=INTROSPECT, request=Message()).result(timeout=30).header
    assert server.pid != old_pid and _ppid(second["pid"]) == server.pid


def test_fork_server_refuses_a_pickle_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    pids: list[int] = []
    server = ForkServer(prefix="nimbus_fstest_", preload=(), env=dict(os.environ), janitor_track=pids.append)
    try:
        server._sock.send(evil_pickle(marker))
        data, fds, _, _ = socket.recv_fds(server._sock, 1 << 16, 1)
        from nimbus.data.codec import decode
        assert "not a spawn request" in decode(data).header["error"] and fds == []
        assert server._proc.poll() is None and not marker.exists() and pids == [server.pid]
    finally:
        server.close()


_DRIVER = """
import sys, time
from nimbus.cost.ledger import Ledger
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.local import LocalRuntime
rt = LocalRuntime(ledger=Ledger(), capacity_cpus=2, start_method="fork_server")
spec = FunctionSpec(name="e", entrypoint="nimbus.runtime.builtin:empty")
rt.prewarm(spec=spec, count=2, wait_s=30)
print(rt._pool._spawner._server.pid, *(w.handle.pid for w in rt._pool.slots.values()), flush=True)
time.sleep(600)
"""


def test_sigkill_of_the_driver_takes_the_fork_server_and_its_workers(tmp_path: Path) -> None:
    """P15 with a fork server: the server dies with the driver, and every worker with the server."""
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in driver.stdout.readline().split()]
        assert len(pids) == 3 and all(pid_alive(p) for p in pids)
        driver.kill()
        driver.wait(timeout=10)
        assert wait_for(lambda: not any(pid_alive(p) for p in pids), timeout_s=10), \
            [p for p in pids if pid_alive(p)]
    finally:
        driver.kill()
        driver.wait()


def test_a_request_without_a_socket_is_answered_with_an_error() -> None:
    server = ForkServer(prefix="nimbus_fstest_", preload=(), env=dict(os.environ), janitor_track=lambda pid: None)
    try:
        from dataclasses import asdict

        from nimbus.data.codec import decode, encode
        from nimbus.runtime.fork_template import SpawnRequest
        request = SpawnRequest(worker_id="x", function="e", entrypoint="nimbus.runtime.builtin:empty", prefix="",
                               spawn_time=0.0, threads=1, driver_pid=os.getpid(), inline_max_bytes=0,
                               compress_min_bytes=-1)
        server._sock.send(encode(Message(header=asdict(request))))
        data, fds, _, _ = socket.recv_fds(server._sock, 1 << 16, 1)
        assert decode(data).header["error"] == "no socket attached" and fds == []
        time.sleep(0.05)
        assert server._proc.poll() is None
    finally:
        server.close()


@pytest.fixture
def spare():
    """runtime/spare_server.py with no server kept, before and after the test (an in-process `nimbus train` of an
    earlier test may have left one)."""
    from nimbus.runtime import spare_server

    spare_server.close_early()
    yield spare_server
    spare_server.close_early()


def _served(runtime) -> ForkServer:
    """The runtime's fork server, once it has served one invocation."""
    runtime.invoke(spec=INTROSPECT, request=Message()).result(timeout=30)
    return runtime._pool._spawner._server


def _parked_by_a_run(make_runtime, spare) -> ForkServer:
    """The server a first runtime on the main thread used and, at its shutdown, kept for the next run."""
    first, _ = make_runtime(start_method="fork_server", preload=("numpy",))
    server = _served(first)
    first.shutdown()
    assert spare._early["server"] is server and server.reusable
    return server


def test_a_server_started_before_the_run_is_adopted_and_its_workers_get_the_runs_prefix(make_runtime, spare) -> None:
    """``nimbus train`` starts the server before the config is parsed (runtime/spare_server.py start_early): the
    runtime uses that very server, its janitor learns the pid, and each worker gets the run's segment prefix."""
    spare.start_early(preload=("numpy",))
    early = spare._early["server"]
    runtime, _ = make_runtime(start_method="fork_server", preload=("numpy",))
    header = runtime.invoke(spec=INTROSPECT, request=Message()).result(timeout=30).header
    assert runtime._pool._spawner._server is early and _ppid(header["pid"]) == early.pid
    assert header["shm_prefix"] == runtime._prefix and header["shm_prefix"].startswith("nimbus")
    assert early._track == runtime._pool._reaper.track_helper   # the run's janitor was told its pid
    assert "server" not in spare._early                     # taken: a second runtime starts its own


def test_an_early_server_with_other_preloads_is_not_adopted(make_runtime, spare) -> None:
    spare.start_early(preload=("numpy", "json"))
    early = spare._early["server"]
    runtime, _ = make_runtime(start_method="fork_server", preload=("numpy",))
    assert _served(runtime) is not early
    assert early._proc.poll() is not None   # replaced by one that fits, not kept beside it


def test_a_runs_server_serves_the_next_run_of_the_process_with_its_own_prefix(make_runtime, spare) -> None:
    """A local runtime built on the main thread takes a main-thread server and parks it at shutdown; the next
    runtime adopts it (no template imports again) and its workers get that runtime's prefix."""
    server = _parked_by_a_run(make_runtime, spare)
    second, _ = make_runtime(start_method="fork_server", preload=("numpy",))
    header = second.invoke(spec=INTROSPECT, request=Message()).result(timeout=30).header
    assert second._pool._spawner._server is server and _ppid(header["pid"]) == server.pid
    assert header["shm_prefix"] == second._prefix   # from the request: the parked server has none


def test_a_variable_set_after_a_run_reaches_the_next_runs_workers(make_runtime, spare, monkeypatch) -> None:
    """A parked server keeps the environment it started with: one set since (a fault to inject, a user's
    variable) means a new server, or the workers would not see it."""
    parked = _parked_by_a_run(make_runtime, spare)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")   # the workers' own limit wins; the server's env must change
    monkeypatch.setenv("NIMBUS_TEST_FLAG", "on")
    server = _served(make_runtime(start_method="fork_server", preload=("numpy",))[0])
    assert server is not parked and parked._proc.poll() is not None
    assert server.env["NIMBUS_TEST_FLAG"] == "on"


def test_a_run_from_another_working_directory_gets_a_new_server(make_runtime, spare, monkeypatch, tmp_path) -> None:
    """Workers run in their server's working directory: a parked server started elsewhere does not fit."""
    parked = _parked_by_a_run(make_runtime, spare)
    monkeypatch.chdir(tmp_path)
    server = _served(make_runtime(start_method="fork_server", preload=("numpy",))[0])
    assert server is not parked and server.cwd == str(tmp_path)


def test_a_server_restarted_on_the_spawner_thread_is_not_parked(make_runtime, spare) -> None:
    """A restart happens on the spawner thread, whose end kills it (PR_SET_PDEATHSIG): closed with the run."""
    runtime, _ = make_runtime(start_method="fork_server", preload=("numpy",))
    first = runtime.invoke(spec=INTROSPECT, request=Message()).result(timeout=30).header
    server = runtime._pool._spawner._server
    os.kill(server.pid, signal.SIGKILL)
    assert wait_for(lambda: not pid_alive(first["pid"]), timeout_s=10)
    runtime.invoke(spec=INTROSPECT, request=Message()).result(timeout=30)
    restarted = server.pid
    assert not server.reusable
    runtime.shutdown()
    assert "server" not in spare._early and not pid_alive(restarted)


def test_nimbus_train_starts_the_server_early_only_for_the_local_fork_server(monkeypatch) -> None:
    from nimbus import cli
    from nimbus.config import parse_config
    from nimbus.runtime import spare_server

    started: list[tuple[tuple[str, ...], bool]] = []
    monkeypatch.setattr(spare_server, "start_early",
                        lambda *, preload, fork_driver: started.append((preload, fork_driver)))
    local, spawn, ray = (parse_config(data={"algo": {"name": "ppo"}, **data}) for data in (
        {}, {"runtime": {"start_method": "spawn"}}, {"runtime": {"backend": "ray"}}))
    for configs, expected in (([local], True), ([spawn], False), ([ray], False), ([local, local], True),
                              ([local, ray], False)):   # several workloads: every one must be local
        started.clear()
        cli._start_fork_server_early(configs=configs)
        assert started == ([(TRAINING_PRELOAD, True)] if expected else []), configs   # a fork of the driver


def test_a_refused_config_exits_2_before_torch_or_a_fork_server_loads() -> None:
    """Validation comes first: `nimbus train` of a bad config loads neither torch nor the early fork server."""
    cartpole = Path(__file__).resolve().parents[3] / "configs" / "ppo-cartpole.yaml"
    code = ("import sys; from nimbus.cli import main\n"
            f"print('exit', main(['train', {str(cartpole)!r}, '--set', 'algo.lr=-1']))\n"
            "from nimbus.runtime import spare_server\n"
            "print('torch' in sys.modules, 'server' in spare_server._early)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["exit", "2", "False", "False"], done.stdout + done.stderr[-2000:]
