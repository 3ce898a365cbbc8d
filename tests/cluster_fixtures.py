"""Fixtures for the ``ray`` and ``redis`` tests (tests/conftest.py imports them: every test module may ask for them).

* ``ray_local`` (module scope): one loopback-only local Ray instance with ``num_cpus=2`` shared by every
  test of the module and kept for the next ray module (Ray takes seconds to start); tests/conftest.py shuts it
  down after the last ray test in a row.
* ``redis_server``: a factory that starts a real ``redis-server`` on a free loopback port (options:
  password, maxmemory with noeviction) and stops every server it started after the test. Tests skip
  with a clear reason if the binary is absent (scripts/setup.sh installs Debian's redis-server).

Example::

    def test_x(redis_server):
        server = redis_server(password="s3cret")
        server.url       # "redis://127.0.0.1:<port>/0"
        server.kill()    # SIGKILL, as a crash
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support import wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RedisServer:
    port: int
    log_path: Path
    password: str | None = None
    maxmemory: str | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--protected-mode", "yes",
                "--save", "", "--appendonly", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        if self.maxmemory:
            argv += ["--maxmemory", self.maxmemory, "--maxmemory-policy", "noeviction"]
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server exited: {self.log_path.read_text()[-2000:]}") from None
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not listen on 127.0.0.1:{self.port}")

    def kill(self) -> None:
        """SIGKILL (a crash: no save, no goodbye)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs Debian's redis-server; "
                    "or: apt-get install -y redis-server)")
    started: list[RedisServer] = []

    def start(*, password: str | None = None, maxmemory: str | None = None) -> RedisServer:
        server = RedisServer(port=free_port(), log_path=tmp_path / f"redis{len(started)}.log", password=password,
                             maxmemory=maxmemory)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


_kept: list = []   # the RayStart of the local instance this process keeps from one ray module to the next


def _ray():
    return pytest.importorskip("ray", reason="the ray tests need the [ray] extra")


def shutdown_ray() -> None:
    """Shut down whatever Ray this process is connected to (the kept local instance too)."""
    _kept.clear()
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()


def _whole(ray, *, num_cpus: int) -> bool:
    """The kept instance has all its CPUs free again (a module's runtimes killed their actors): waits a moment for
    the kills to land."""
    return wait_for(lambda: ray.available_resources().get("CPU", 0) >= num_cpus, timeout_s=5.0, interval_s=0.1)


@pytest.fixture(scope="module")
def ray_local() -> Iterator:
    """A loopback-only local Ray (num_cpus=2) for the module. Starting one takes seconds, so the instance is kept
    for the next module that asks for it (tests/conftest.py runs every ray test back to back on one worker and
    shuts it down after the last); one whose CPUs are not all free again is replaced."""
    ray = _ray()
    from nimbus.runtime.ray_cluster import start_local_ray

    if not (_kept and ray.is_initialized() and _whole(ray, num_cpus=2)):
        shutdown_ray()
        _kept.append(start_local_ray(num_cpus=2))
    yield _kept[-1]


@pytest.fixture(scope="module")
def ray_two_nodes() -> Iterator:
    """A two-node ``ray.cluster_utils.Cluster`` on loopback (head: 1 CPU, worker: 2 CPUs), connected."""
    _ray()
    from ray.cluster_utils import Cluster

    from nimbus.runtime.ray_cluster import force_loopback

    shutdown_ray()
    force_loopback()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "object_store_memory": 150 * 2**20})
    cluster.add_node(num_cpus=2, object_store_memory=150 * 2**20)
    sys.modules["ray"].init(address=cluster.address, logging_level="WARNING")
    cluster.wait_for_nodes()
    yield cluster
    shutdown_ray()
    cluster.shutdown()
