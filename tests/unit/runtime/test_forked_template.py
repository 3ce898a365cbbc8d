"""``nimbus train``'s fork server as a fork of the driver (``ForkServer(fork_driver=True)``, fork_template.py
``run_forked``): the template imports nothing again, yet is what a fresh template would be (its own session, stdin
from /dev/null, no descriptor of the driver's but stdout and stderr, the server's environment, no signal handler of
the driver's), serves workers and dies with the driver. Each case runs in a fresh interpreter: a test process has
threads (pytest-xdist's), where the server is started afresh instead (the last test)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from runtime_helpers import pid_alive, wait_for

_DRIVER = r"""
import json, os, signal, sys, tempfile, threading, time
from pathlib import Path
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.runtime import spare_server
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.forkserver import TemplateProcess
from nimbus.runtime.local import LocalRuntime

if sys.argv[1] == "thread":   # another Python thread: forking would copy the locks it holds, so a fresh template
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
kept_r, kept_w = os.pipe()              # a descriptor of the driver's the template must not hold
signal.signal(signal.SIGUSR1, lambda *_: None)   # a handler of the driver's the template must not run
os.environ["NIMBUS_TEST_FLAG"] = "driver"
os.environ.pop("MKL_NUM_THREADS", None)   # the server's environment sets it (runtime/interpreter.py worker_env)
spare_server.start_early(preload=("numpy",), fork_driver=True)
server = spare_server._early["server"]
with tempfile.TemporaryDirectory() as tmp:
    runtime = LocalRuntime(ledger=Ledger(path=Path(tmp) / "ledger.jsonl"), capacity_cpus=2, start_method="fork_server",
                           preload=("numpy",))
    spec = FunctionSpec(name="introspect", entrypoint="nimbus.runtime.builtin:introspect", timeout_s=20.0)
    asked = Message(header={"variables": ["NIMBUS_TEST_FLAG", "MKL_NUM_THREADS"]})
    header = runtime.invoke(spec=spec, request=asked).result(timeout=30).header
    forked, adopted = isinstance(server._proc, TemplateProcess), runtime._pool._spawner._server is server
    print(json.dumps({"forked": forked, "adopted": adopted, "template": server.pid, "worker": header["pid"],
                      "worker_prefix": header["shm_prefix"], "prefix": runtime._prefix, "kept_fd": kept_w,
                      "variables": header["variables"], "sys_path": header["sys_path"]}),
          flush=True)
    if sys.argv[1] == "kill":
        sys.stdin.readline()   # the test has looked at the template; now it SIGKILLs this driver
    runtime.shutdown()
"""


def _start(mode: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()[-3000:]
    return proc, json.loads(line)


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def test_the_template_is_a_fork_of_the_driver_made_like_a_fresh_one() -> None:
    proc, seen = _start("kill")
    try:
        template = seen["template"]
        assert seen["forked"] and seen["adopted"]
        stat = _stat(template)
        assert int(stat[1]) == proc.pid and int(stat[3]) == template   # the driver's child, in its own session
        assert int(_stat(seen["worker"])[1]) == template                 # which forks the workers
        assert seen["worker_prefix"] == seen["prefix"]
        fds = {int(fd): os.readlink(f"/proc/{template}/fd/{fd}") for fd in os.listdir(f"/proc/{template}/fd")}
        assert fds[0] == "/dev/null" and seen["kept_fd"] not in fds
        assert len([fd for fd in fds if fd > 2]) == 1, fds                # its socket to the driver, nothing else
        assert seen["variables"] == {"NIMBUS_TEST_FLAG": "driver", "MKL_NUM_THREADS": "1"}   # the server's environment
        assert "" not in seen["sys_path"]           # `python -c` put the current directory first: dropped, as -P does
        caught = int(Path(f"/proc/{template}/status").read_text().split("SigCgt:")[1].split()[0], 16)
        assert not caught & (1 << (signal.SIGUSR1 - 1))                  # the driver's Python handler is gone
        # P15: the driver SIGKILLed, the template (PR_SET_PDEATHSIG) and so its workers die with it
        proc.kill()
        proc.wait(timeout=10)
        assert wait_for(lambda: not pid_alive(template) and not pid_alive(seen["worker"]), timeout_s=10)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_driver_that_runs_another_thread_starts_a_fresh_template() -> None:
    proc, seen = _start("thread")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert not seen["forked"] and seen["adopted"]
    assert wait_for(lambda: not pid_alive(seen["template"]), timeout_s=10)


def test_a_forked_template_leaves_nothing_once_the_driver_exits() -> None:
    proc, seen = _start("exit")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert wait_for(lambda: not pid_alive(seen["template"]) and not pid_alive(seen["worker"]), timeout_s=10)
