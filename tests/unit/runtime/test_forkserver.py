"""The fork server (runtime/forkserver.py): workers forked from a template, no pickles, no orphans (P15)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.forkserver import ForkServer
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
        assert server._proc.wait(timeout=20) == 2
        assert not marker.exists() and pids == [server.pid]
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
        from nimbus.data.codec import decode, encode
        server._sock.send(encode(Message(header={"worker_id": "x"})))
        data, fds, _, _ = socket.recv_fds(server._sock, 1 << 16, 1)
        assert decode(data).header["error"] == "no socket attached" and fds == []
        time.sleep(0.05)
        assert server._proc.poll() is None
    finally:
        server.close()
