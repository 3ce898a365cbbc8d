"""A lost store (P12) ends a run of several policies cleanly, as it ends a one-policy run: every member's final
checkpoint, population.json naming the reason, then StoreUnavailable (tests/integration/test_redis_store_runs.py
has the one-policy case)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from nimbus.data.checkpoint import load_checkpoint
from nimbus.errors import StoreUnavailable
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train

pytestmark = pytest.mark.redis
TWO = "policies=[{name: a, algo: {lr: 1.0e-3}}, {name: b, algo: {lr: 3.0e-4}}]"


def test_redis_killed_mid_run_stops_a_population_cleanly_with_every_members_checkpoint(
        make_config, redis_server, tmp_path: Path) -> None:
    server = redis_server()
    config = make_config(overrides=["store.backend=redis", f"store.url={server.url}", "store.max_retries=2",
                                    "store.backoff_base_s=0.02", "store.backoff_cap_s=0.2", "store.timeout_s=1.0",
                                    "train.max_rounds=500", TWO])

    def kill_after_two_rounds_of_each() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = list(tmp_path.glob("*/policies/*/metrics.jsonl"))
            if len(found) == 2 and all(len(p.read_text().splitlines()) >= 2 for p in found):
                server.kill()
                return
            time.sleep(0.01)

    threading.Thread(target=kill_after_two_rounds_of_each, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="stopped cleanly after rounds"):
        train(config=config)
    assert time.monotonic() - started < 90
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "population.json").exists()]
    members = json.loads((run_dir / "population.json").read_text())["members"]
    assert {m["stopped_by"] for m in members.values()} == {"store_unavailable"}
    for name, member in members.items():
        rows = read_metrics(path=run_dir / "policies" / name / "metrics.jsonl")
        checkpoint = load_checkpoint(path=run_dir / "policies" / name)
        assert member["rounds"] == len(rows) >= 2 and checkpoint.round == len(rows)
