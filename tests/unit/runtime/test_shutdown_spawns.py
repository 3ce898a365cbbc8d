"""A closing runtime starts nothing: spawns still queued are dropped, one in progress is cut short, and a dead
fork server is not replaced (#28.9: the driver started a new fork server, importing torch, while shutting down)."""

from __future__ import annotations

import os
import signal
import threading
import time

from nimbus.runtime.base import FunctionSpec
from nimbus.runtime.forkserver import ForkServer
from nimbus.runtime.pool import Spawner
from runtime_helpers import wait_for

EMPTY = FunctionSpec(name="empty", entrypoint="nimbus.runtime.builtin:empty", timeout_s=20.0)


def test_spawns_queued_when_the_spawner_closes_are_dropped() -> None:
    started, refused, release = [], [], threading.Event()

    def on_spawned(worker_id, handle, error) -> None:
        if handle is not None:
            started.append(handle)
            release.wait(timeout=30)   # hold the spawner thread while more spawns queue up and close() comes
        else:
            refused.append((worker_id, str(error)))

    spawner = Spawner(prefix="nimbus_h1close_", inline_max_bytes=1 << 16, compress_min_bytes=None,
                      on_spawned=on_spawned, start_method="spawn")
    try:
        spawner.spawn(worker_id="w0", spec=EMPTY)
        assert wait_for(lambda: started, timeout_s=30)
        for i in range(1, 5):
            spawner.spawn(worker_id=f"w{i}", spec=EMPTY)
        closer = threading.Thread(target=spawner.close)
        closer.start()
        assert wait_for(lambda: spawner._closing, timeout_s=5)
        release.set()
        closer.join(timeout=30)
        assert len(started) == 1 and [w for w, _ in refused] == ["w1", "w2", "w3", "w4"]
        assert all("shutting down" in reason for _, reason in refused)
    finally:
        release.set()
        for handle in started:
            handle.sock.close()
            handle.proc.kill()
            handle.proc.wait()


def test_an_interrupted_fork_server_is_not_replaced_and_its_slow_restart_is_cut_short() -> None:
    """The server died (SIGTERM to the group, say); a spawn starts a new one, which imports torch for seconds;
    interrupt() (Spawner.close) makes that spawn fail at once, and no later spawn starts another server."""
    pids: list[int] = []
    server = ForkServer(prefix="nimbus_h1close_", preload=("torch",), env=dict(os.environ), janitor_track=pids.append)
    outcome: list[BaseException | None] = []
    try:
        os.kill(server.pid, signal.SIGKILL)
        server._proc.wait()

        def spawn() -> None:
            try:
                server.spawn(worker_id="w1", spec=EMPTY, inline_max_bytes=1 << 16, compress_min_bytes=None)
                outcome.append(None)
            except OSError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=spawn)
        thread.start()
        assert wait_for(lambda: len(pids) == 2, timeout_s=30)   # the replacement started and is importing torch
        interrupted_at = time.monotonic()
        server.interrupt()
        thread.join(timeout=30)
        assert outcome and isinstance(outcome[0], OSError) and "closing" in str(outcome[0]), outcome
        assert time.monotonic() - interrupted_at < 2.0   # not after the replacement's torch import and warm-up
        try:
            server.spawn(worker_id="w2", spec=EMPTY, inline_max_bytes=1 << 16, compress_min_bytes=None)
            raise AssertionError("a closing fork server forked a worker")
        except OSError as exc:
            assert "closing" in str(exc)
        assert len(pids) == 2   # no third server
    finally:
        server.close()
