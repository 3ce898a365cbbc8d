"""P15: when the driver is SIGKILLed, its workers die and its shared-memory segments disappear."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nimbus.data.shm import PREFIX_ENV, Segment, list_segments, run_prefix
from nimbus.runtime.janitor import JanitorClient
from runtime_helpers import pid_alive, wait_for

DRIVER = r"""
import json, sys, time
import numpy as np
from pathlib import Path
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.data.shm import Segment, run_prefix, segment_name
from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.local import LocalRuntime

pid_path = Path(sys.argv[1])
runtime = LocalRuntime(ledger=Ledger(), capacity_cpus=2, start_method=sys.argv[2])
sleep = FunctionSpec(name="sleep", entrypoint="nimbus.runtime.builtin:sleep", timeout_s=120)
runtime.prewarm(spec=FunctionSpec(name="echo", entrypoint="nimbus.runtime.builtin:echo"), count=1, wait_s=60)
busy = runtime.invoke(spec=sleep, request=Message(header={"seconds": 120, "pid_path": str(pid_path)},
                                                  arrays={"pad": np.zeros(1 << 18, np.uint8)}))
other = Segment.create(name=segment_name(kind="store"), size_bytes=4096)  # another part's segment
while not pid_path.exists():
    time.sleep(0.01)
print(json.dumps({"prefix": run_prefix(), "janitor": runtime._pool.janitor_pid}), flush=True)
time.sleep(600)
"""


def _workers_of(driver_pid: int) -> list[int]:
    """The driver's worker processes and fork server, and the workers that server forked."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == driver_pid and b"nimbus.runtime.worker" in cmdline:
            pids.append(int(entry.name))
        elif ppid == driver_pid and b"nimbus.runtime.fork_template" in cmdline:
            pids += [int(entry.name), *_workers_of(int(entry.name))]
    return pids


@pytest.mark.parametrize("start_method,processes", [("spawn", 2), ("fork_server", 3)])
def test_p15_sigkilled_driver_leaves_no_workers_and_no_segments(tmp_path: Path, start_method: str,
                                                                 processes: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != PREFIX_ENV}  # the driver picks its own run prefix
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "pid"), start_method], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(driver.stdout.readline())
        prefix = info["prefix"]
        assert re.fullmatch(r"nimbus_r[0-9a-f]{16}_", prefix)  # claimed: locked by the driver
        workers = _workers_of(driver.pid)
        assert len(workers) == processes and all(pid_alive(pid) for pid in workers)
        assert len(list_segments(prefix=prefix)) == 3  # the request body, the other part's segment, the owner file
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    assert wait_for(lambda: not any(pid_alive(pid) for pid in workers), timeout_s=5)
    assert wait_for(lambda: list_segments(prefix=prefix) == [], timeout_s=5)
    assert wait_for(lambda: not pid_alive(info["janitor"]), timeout_s=5)


def test_clean_stop_leaves_the_run_alone() -> None:
    prefix = run_prefix() + "janitor_"
    segment = Segment.create(name=prefix + "keep", size_bytes=64)
    segment.close()
    janitor = JanitorClient(prefix=prefix)
    janitor.stop()
    assert list_segments(prefix=prefix) == [prefix + "keep"]
    segment.unlink()
