"""A SIGKILLed driver's Redis keys do not outlive it: every key of the run is leased (TTL ``store.lease_s``)
and only a live driver renews the lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from support import wait_for

pytestmark = pytest.mark.redis
REPO = Path(__file__).resolve().parents[2]
LEASE_S = 1.5


def _run_keys(client: redis.Redis) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter("nimbus:*", count=1000))


def test_a_sigkilled_drivers_keys_are_gone_after_the_lease(redis_server, tmp_path: Path) -> None:
    server = redis_server()
    client = redis.Redis.from_url(server.url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nimbus.cli", "train", str(REPO / "configs" / "ppo-cartpole.yaml"),
         "--set", f"output.root_dir={tmp_path}", "--set", "train.total_env_steps=10000000",
         "--set", "output.loggers=[]", "--set", "output.report=false", "--set", "train.eval_episodes=0",
         "--set", "store.backend=redis", "--set", f"store.url={server.url}", "--set", f"store.lease_s={LEASE_S}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        def rounds() -> int:
            metrics = list(tmp_path.glob("*/metrics.jsonl"))
            return len(metrics[0].read_text().splitlines()) if metrics else 0

        # Alive for several leases: the driver renews them, so the run keeps going on its own keys.
        started = time.monotonic()
        assert wait_for(lambda: rounds() >= 3 and time.monotonic() - started > 3 * LEASE_S, timeout_s=180,
                        interval_s=0.05), \
            proc.stderr.read()[-3000:] if proc.poll() is not None else "no rounds"
        assert proc.poll() is None
        keys = _run_keys(client)
        assert any(k.endswith(":run") for k in keys) and any(":v:weights/main/" in k for k in keys)
        # each one leased (-1: a key with no TTL); a key the run deleted since the scan (a consumed batch) answers -2
        ttls = {key: client.pttl(key) for key in keys}
        leased = {key: ttl for key, ttl in ttls.items() if ttl != -2}
        assert leased and all(0 < ttl <= LEASE_S * 1000 for ttl in leased.values()), ttls
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its janitor and workers: no clean-up runs
        proc.wait(timeout=30)
    assert _run_keys(client)  # nothing deleted them...
    # ...the lease expired them
    assert wait_for(lambda: _run_keys(client) == [], timeout_s=LEASE_S + 2, interval_s=0.05)
