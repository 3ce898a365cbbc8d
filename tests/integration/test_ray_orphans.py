"""P15 on the ray backend: SIGKILL the driver of a run that started its own Ray — no Ray process, actor
or shared-memory segment of it survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from nimbus.data.shm import list_segments
from nimbus.runtime.ray_cluster import descendants
from support import wait_for

pytestmark = pytest.mark.ray

DRIVER = """
import sys, time
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.data.shm import Segment, run_prefix
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.ray_backend import RayRuntime
runtime = RayRuntime(ledger=Ledger(), address="local", capacity_cpus=2)
Segment.create(name=run_prefix() + "bk_test", size_bytes=4096)     # stands for the buffer
spec = FunctionSpec(name="sleep", entrypoint="nimbus.runtime.builtin:sleep", resources=Resources(cpus=0.5))
runtime.invoke(spec=spec, request=Message(header={"seconds": 0.0})).result(timeout=120)
runtime.invoke(spec=spec, request=Message(header={"seconds": 3600, "pid_path": sys.argv[1]}))
print("READY", run_prefix(), flush=True)
time.sleep(3600)
"""


def test_killed_driver_leaves_no_ray_process_and_no_segment(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NIMBUS_SHM_PREFIX"}
    pid_path = tmp_path / "sleeper.pid"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(pid_path)], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        line = driver.stdout.readline()
        assert line.startswith("READY"), line
        prefix = line.split()[1]
        assert wait_for(pid_path.exists, timeout_s=30)   # the sleeping attempt is running
        spawned = descendants(root=driver.pid)
        assert int(pid_path.read_text()) in spawned and list_segments(prefix=prefix)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (any(_alive(pid) for pid in spawned) or list_segments(prefix=prefix)):
        time.sleep(0.1)
    assert [pid for pid in spawned if _alive(pid)] == []
    assert list_segments(prefix=prefix) == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
