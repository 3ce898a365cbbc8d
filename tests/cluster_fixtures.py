"""Fixtures for the ``ray`` and ``redis`` tests (import them into a test module to use them).

* ``ray_local`` (module scope): one loopback-only local Ray instance with ``num_cpus=2`` shared by every
  test of the module (Ray takes seconds to start); shut down after the module.
* ``redis_server``: a factory that starts a real ``redis-server`` on a free loopback port (options:
  password, maxmemory with noeviction) and stops every server it started after the test. Tests skip
  with a clear reason if the binary is absent (scripts/setup.sh installs Debian's redis-server).

Example::

    from cluster_fixtures import ray_local, redis_server  # noqa: F401  (pytest fixtures)

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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest


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

    def start(self) -> "RedisServer":
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
                    raise RuntimeError(f"redis-server exited: {self.log_path.read_text()[-2000:]}")
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


@pytest.fixture(scope="module")
def ray_local() -> Iterator:
    ray = pytest.importorskip("ray", reason="the ray tests need the [ray] extra")
    from nimbus.runtime.ray_cluster import start_local_ray

    if ray.is_initialized():
        ray.shutdown()
    start = start_local_ray(num_cpus=2)
    yield start
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_two_nodes() -> Iterator:
    """A two-node ``ray.cluster_utils.Cluster`` on loopback (head: 1 CPU, worker: 2 CPUs), connected."""
    ray = pytest.importorskip("ray", reason="the ray tests need the [ray] extra")
    from ray.cluster_utils import Cluster

    from nimbus.runtime.ray_cluster import force_loopback

    if ray.is_initialized():
        ray.shutdown()
    force_loopback()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "object_store_memory": 150 * 2**20})
    cluster.add_node(num_cpus=2, object_store_memory=150 * 2**20)
    ray.init(address=cluster.address, logging_level="WARNING")
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()
